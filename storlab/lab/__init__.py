"""The lab: throwaway instances and their folders, placements, devices storlab makes, templates, mounts, the state each run starts from, and a failed server in its own words."""
