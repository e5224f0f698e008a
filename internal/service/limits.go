package service

import (
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/metrics"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// ModelLimitKey is the model's limit's key in cairn-limits.
const ModelLimitKey = "model"

// ModelBurst is how many model calls may go at once after a quiet spell: one, so the calls
// are evenly spaced and no window of a second holds more than CAIRN_MODEL_RPS of them,
// plus the one at its edge.
const ModelBurst = 1

// ModelLimit is the model's declared limit, CAIRN_MODEL_RPS, shared by every extract
// instance: the extractor waits for it, and `cairn faultmap` prints it.
func (c Config) ModelLimit() ratelimit.Limit {
	return ratelimit.Limit{Bucket: assets.BucketLimits, Key: ModelLimitKey, PerSecond: c.ModelRPS, Burst: ModelBurst}
}

// LedgerLimitKey is the limit of the ledger's API (CAIRN_LEDGER_RPS) in cairn-limits.
const LedgerLimitKey = "ledger"

// LedgerBurst is how many ledger calls may go at once after a quiet spell.
const LedgerBurst = 10

// LedgerLimit is the declared limit of the ledger's API, shared by post-ledger and the
// compensator, every instance: each call waits for it, and a Retry-After the ledger
// answers holds it for all of them.
func (c Config) LedgerLimit() ratelimit.Limit {
	return ratelimit.Limit{Bucket: assets.BucketLimits, Key: LedgerLimitKey, PerSecond: c.LedgerRPS, Burst: LedgerBurst}
}

// limitMetrics counts the grants, waits, lost bookings, unreachable bucket and holds of
// lim, the shared limit of system (cairn_<system>_limit_…), declared by setting.
func limitMetrics(m *metrics.Metrics, lim *ratelimit.Limiter, system, setting string) {
	name := func(what string) string { return "cairn_" + system + "_limit_" + what }
	m.CounterFunc(name("grants_total"), "Calls to "+system+" granted by the shared "+setting+" limit.",
		func() float64 { return float64(lim.Stats().Grants) })
	m.CounterFunc(name("wait_seconds_total"), "Time calls to "+system+" waited for the shared "+setting+" limit (holds included), not counted in the call's timeout.",
		func() float64 { return lim.Stats().Waited.Seconds() })
	m.CounterFunc(name("conflicts_total"), "Bookings of the "+system+" limit lost to another instance's, and tried again.",
		func() float64 { return float64(lim.Stats().Conflicts) })
	m.CounterFunc(name("unreachable_total"), "Reads or writes of cairn-limits for "+system+" that failed; no call goes without a booking.",
		func() float64 { return float64(lim.Stats().Unreachable) })
	m.CounterFunc(name("holds_total"), "Retry-After answers of "+system+" held in the shared limit, for every instance.",
		func() float64 { return float64(lim.Stats().Holds) })
}
