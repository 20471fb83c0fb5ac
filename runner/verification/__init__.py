"""Verification: qualification probes before load (`probes`) and the basic report after it
(`basic`). DESIGN.md §4 "Verification" lists the full set; later work extends these."""
