"""Storage: the tables and every SQL statement the bridge runs.

The rest of the bridge never builds a statement: beat, the workers and the
management side call the gateways here with values and get values back.
"""
