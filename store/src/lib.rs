//! SQLite persistence of wuu (under construction).
