// Package core declares the types every policy shares (Job, Node, Input,
// Allocations, the Policy interface, Regime) and the input checks they
// use. It sits below package policy and the policies it registers, so
// that both can import it; users read these types under package policy's
// names.
package core
