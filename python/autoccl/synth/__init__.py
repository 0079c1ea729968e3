"""Topology-aware collective synthesis (TACOS done completely)."""
