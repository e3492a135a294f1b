"""The answer: statistics (factor effects, paired ranking, sequential stopping, racing), composed once into one typed value every renderer reads."""
