"""What is drafted and what is accepted: acceptance models, drafters, token trees and speculation policies."""
