"""The standard normal quantile function, vectorised over numpy arrays (no scipy on the main command's path).

Wichura's Algorithm AS241 (PPND16: Wichura, M. J. (1988), "The Percentage Points of the Normal Distribution",
Applied Statistics 37(3), 477-484), the same rational approximations as Python's statistics.NormalDist.inv_cdf,
accurate to about 1e-16 relative.
"""
from __future__ import annotations

import numpy as np

# numerator and denominator coefficients, highest power first (numpy.polyval's order)
_CENTRAL = ([2.5090809287301226727e+3, 3.3430575583588128105e+4, 6.7265770927008700853e+4, 4.5921953931549871457e+4,
             1.3731693765509461125e+4, 1.9715909503065514427e+3, 1.3314166789178437745e+2, 3.3871328727963666080e+0],
            [5.2264952788528545610e+3, 2.8729085735721942674e+4, 3.9307895800092710610e+4, 2.1213794301586595867e+4,
             5.3941960214247511077e+3, 6.8718700749205790830e+2, 4.2313330701600911252e+1, 1.0])
_INNER_TAIL = ([7.74545014278341407640e-4, 2.27238449892691845833e-2, 2.41780725177450611770e-1,
                1.27045825245236838258e+0, 3.64784832476320460504e+0, 5.76949722146069140550e+0,
                4.63033784615654529590e+0, 1.42343711074968357734e+0],
               [1.05075007164441684324e-9, 5.47593808499534494600e-4, 1.51986665636164571966e-2,
                1.48103976427480074590e-1, 6.89767334985100004550e-1, 1.67638483018380384940e+0,
                2.05319162663775882187e+0, 1.0])
_OUTER_TAIL = ([2.01033439929228813265e-7, 2.71155556874348757815e-5, 1.24266094738807843860e-3,
                2.65321895265761230930e-2, 2.96560571828504891230e-1, 1.78482653991729133580e+0,
                5.46378491116411436990e+0, 6.65790464350110377720e+0],
               [2.04426310338993978564e-15, 1.42151175831644588870e-7, 1.84631831751005468180e-5,
                7.86869131145613259100e-4, 1.48753612908506148525e-2, 1.36929880922735805310e-1,
                5.99832206555887937690e-1, 1.0])


def _polyval(coefficients, x: np.ndarray) -> np.ndarray:
    """numpy.polyval's Horner loop (y = y * x + c from y = 0), in place: the same floats, fewer temporaries."""
    y = x * coefficients[0]  # (0 * x + c0) * x for finite x
    y += coefficients[1]
    for c in coefficients[2:]:
        y *= x
        y += c
    return y


def _ratio(coefficients, x: np.ndarray) -> np.ndarray:
    numerator, denominator = coefficients
    out = _polyval(numerator, x)
    out /= _polyval(denominator, x)
    return out


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """x with Phi(x) = p, for p in (0, 1) elementwise (a C-ordered array): the central branch over the whole array
    (cheaper than selecting its ~85% of the elements), then the tails, evaluated only where they apply (found once,
    as flat indices), overwrite it; the far tail (p below ~1e-11) only if some p is there."""
    p = np.ascontiguousarray(p, dtype=float)
    q = p - 0.5
    with np.errstate(all="ignore"):  # the central formula is meaningless (and may overflow) in the tails
        x = q * _ratio(_CENTRAL, 0.180625 - q ** 2)
    flat_q = q.reshape(-1)
    tail = np.flatnonzero(np.abs(flat_q) > 0.425)
    if tail.size:
        qt, pt = flat_q[tail], p.reshape(-1)[tail]
        r = np.sqrt(-np.log(np.where(qt <= 0.0, pt, 1.0 - pt)))
        inner = r <= 5.0
        if inner.all():
            out = _ratio(_INNER_TAIL, r - 1.6)
        else:
            out = np.empty_like(r)
            out[inner] = _ratio(_INNER_TAIL, r[inner] - 1.6)
            outer = ~inner
            out[outer] = _ratio(_OUTER_TAIL, r[outer] - 5.0)
        x.reshape(-1)[tail] = out * np.sign(qt)
    return x
