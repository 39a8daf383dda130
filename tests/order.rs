//! Tests of the `order` module and the `order` command against `fixtures/orders`.
