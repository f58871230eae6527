"""Tooling shared by the tests and the benchmarks of a checkout (not part of the installed
package): database servers of their own, the databases' plans of the claim's reads."""
