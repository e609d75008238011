// Package archtest holds the architecture's rules as a test: the layer of
// every package of the module, which packages may use the HashiCorp APIs,
// and what the controller (no reporting package) and the worker libraries
// may not depend on. `make check` runs it; the README's folder table is
// the same list in prose.
package archtest
