"""The delivery-guarantee lab: real faults against every delivery mode, measured against manifests."""
