#![cfg(feature = "sim")]
