// Package metrics holds Cairn's Prometheus metrics and serves them on /metrics.
//
// One process has one *Metrics; when `cairn dev` runs every service in one process they share
// it, and the step label tells them apart. Counters count events, never runs' exact attempts:
// tests assert on them only as "above zero".
package metrics
