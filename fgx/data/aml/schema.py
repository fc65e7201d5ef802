"""The Kaggle AMLworld transaction CSV schema (IBM "Transactions for Anti Money Laundering")."""
from __future__ import annotations

# Header exactly as in HI-Small_Trans.csv; pandas reads the second "Account" as "Account.1".
COLUMNS = ["Timestamp", "From Bank", "Account", "To Bank", "Account", "Amount Received",
           "Receiving Currency", "Amount Paid", "Payment Currency", "Payment Format", "Is Laundering"]
PANDAS_COLUMNS = ["Timestamp", "From Bank", "Account", "To Bank", "Account.1", "Amount Received",
                  "Receiving Currency", "Amount Paid", "Payment Currency", "Payment Format", "Is Laundering"]
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M"

# Currencies of AMLworld with approximate value in US dollars (used by the generator's conversion).
USD_RATES = {
    "US Dollar": 1.0, "Euro": 1.17, "Yuan": 0.15, "Shekel": 0.29, "Canadian Dollar": 0.79,
    "UK Pound": 1.37, "Rupee": 0.0134, "Yen": 0.0092, "Bitcoin": 11800.0, "Swiss Franc": 1.09,
    "Australian Dollar": 0.72, "Ruble": 0.0135, "Mexican Peso": 0.049, "Brazil Real": 0.18,
    "Saudi Riyal": 0.27,
}
CURRENCIES = list(USD_RATES)
PAYMENT_FORMATS = ["ACH", "Cheque", "Credit Card", "Wire", "Cash", "Reinvestment", "Bitcoin"]
TYPOLOGIES = ["fan_out", "fan_in", "cycle", "scatter_gather", "gather_scatter", "bipartite", "stack", "random"]
