// Package metrics turns a worker's metrics document (contract.Metrics,
// docs/contracts.md §3) into the inputs of the goodput model:
// model.ProfilePoint observations for the throughput fit and
// model.GradParams for the efficiency model. The document itself (type,
// parser, validation, canonical encoding) is the contract package's.
//
// The package is pure: no I/O, no clock.
package metrics
