//! Integration tests of the audit over whole exports: the project's own templates, every
//! fixture, the SARIF schema, a large workflow and arbitrary JSON.

mod corpus;
mod robustness;
mod sarif;
