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

// limitMetrics counts lim's grants and waits.
func limitMetrics(m *metrics.Metrics, lim *ratelimit.Limiter) {
	m.CounterFunc("cairn_model_limit_grants_total", "Model calls granted by the shared CAIRN_MODEL_RPS limit.",
		func() float64 { return float64(lim.Stats().Grants) })
	m.CounterFunc("cairn_model_limit_wait_seconds_total", "Time model calls waited for the shared CAIRN_MODEL_RPS limit, not counted in CAIRN_MODEL_TIMEOUT.",
		func() float64 { return lim.Stats().Waited.Seconds() })
	m.CounterFunc("cairn_model_limit_conflicts_total", "Bookings of the model's limit lost to another instance's, and tried again.",
		func() float64 { return float64(lim.Stats().Conflicts) })
	m.CounterFunc("cairn_model_limit_unreachable_total", "Reads or writes of cairn-limits that failed; no call goes without a booking.",
		func() float64 { return float64(lim.Stats().Unreachable) })
}

// ledgerLimitMetrics counts the grants, waits and holds of the ledger API's limit.
func ledgerLimitMetrics(m *metrics.Metrics, lim *ratelimit.Limiter) {
	m.CounterFunc("cairn_ledger_limit_grants_total", "Ledger API calls granted by the shared CAIRN_LEDGER_RPS limit.",
		func() float64 { return float64(lim.Stats().Grants) })
	m.CounterFunc("cairn_ledger_limit_wait_seconds_total", "Time ledger API calls waited for the shared CAIRN_LEDGER_RPS limit, holds included.",
		func() float64 { return lim.Stats().Waited.Seconds() })
	m.CounterFunc("cairn_ledger_limit_holds_total", "Retry-After answers of the ledger API held in the shared limit, for every instance.",
		func() float64 { return float64(lim.Stats().Holds) })
}
