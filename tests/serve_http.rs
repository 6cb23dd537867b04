//! `pocket serve` end to end (placeholder while the suite is written).
