//! Parsers for /proc text files.
