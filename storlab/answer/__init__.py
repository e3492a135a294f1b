"""The answer: statistics (factor effects, paired ranking, sequential stopping, racing), the terminal tables, export."""
