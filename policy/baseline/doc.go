// Package baseline holds the baselines of the Pollux paper (OSDI '21,
// §5): Tiresias (two-queue least attained service, each job on the GPUs
// it requested) and Optimus+Oracle (GPUs to the largest gain in
// remaining time, from the true remaining work).
package baseline
