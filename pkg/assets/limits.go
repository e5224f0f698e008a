package assets

import (
	"cmp"
	"errors"
	"fmt"
)

// Limits are the size limits of a space's assets, in bytes: every bucket, the object store
// and every stream is bounded, so that no service can fill the server's disk (one stored 50
// MB). Nothing past a limit is dropped: the buckets, the object store and the streams whose
// messages recovery needs (the work queues, the saga, the outbox) discard new writes, so a
// full store refuses the write and the writer's error makes its run handed over, where a
// person sees it. Only the streams that only record (the timeline, the refusals) let their
// oldest messages go (AuditMaxAge, RejectedMaxAge). The zero value of a field is its default;
// cairn init sets them (CAIRN_MAX_*_BYTES) on new and existing assets alike.
//
// The server reserves each stream's MaxBytes from its JetStream storage (max_file_store):
// the sum over every space on one server must fit it (deploy/nats: 20GB).
type Limits struct {
	// Runs bounds the runs bucket: the records, with their history (16 revisions a run).
	Runs int64 `json:"runs,omitempty"`
	// Memo bounds the memo bucket, which keeps an answer per document and run.
	Memo int64 `json:"memo,omitempty"`
	// Buckets bounds each other bucket: handovers, outbox marks, natural keys, rate limits,
	// keys.
	Buckets int64 `json:"buckets,omitempty"`
	// Artifacts bounds the object store.
	Artifacts int64 `json:"artifacts,omitempty"`
	// Queues bounds each work queue: the run commands and the step events.
	Queues int64 `json:"queues,omitempty"`
	// Saga bounds the saga stream: the intents and outcomes an undo reads.
	Saga int64 `json:"saga,omitempty"`
	// Outbox bounds the outbox stream: the queued messages.
	Outbox int64 `json:"outbox,omitempty"`
}

// The default Limits (docs/trust.md, "Bounded sizes").
const (
	DefaultRunsBytes      = 512 << 20 // 512 MiB
	DefaultMemoBytes      = 256 << 20 // 256 MiB
	DefaultBucketBytes    = 64 << 20  // 64 MiB
	DefaultArtifactsBytes = 512 << 20 // 512 MiB
	DefaultQueueBytes     = 128 << 20 // 128 MiB
	DefaultSagaBytes      = 256 << 20 // 256 MiB
	DefaultOutboxBytes    = 256 << 20 // 256 MiB
	// MinLimitBytes is the smallest limit a setting may give.
	MinLimitBytes = 1 << 20 // 1 MiB
)

// The largest value or message each asset takes: a larger one is refused by the server
// (err_code 10054, "message size exceeds maximum allowed"). A record is at most 8 KiB
// (kvcheckpoint.MaxSize), a command or a step event 64 KiB of data (events.MaxSize).
const (
	MaxRecordSize  = 32 << 10  // the runs bucket
	MaxMemoSize    = 1 << 20   // the memo bucket: a model's or a memoised step's answer
	MaxValueSize   = 64 << 10  // every other bucket
	MaxEventSize   = 128 << 10 // the work queues: data and headers
	MaxSagaMsgSize = 256 << 10 // a saga record
	MaxOutboxSize  = 1 << 20   // an outbox message: a mail or a webhook's body
)

func (l Limits) withDefaults() Limits {
	l.Runs = cmp.Or(l.Runs, DefaultRunsBytes)
	l.Memo = cmp.Or(l.Memo, DefaultMemoBytes)
	l.Buckets = cmp.Or(l.Buckets, DefaultBucketBytes)
	l.Artifacts = cmp.Or(l.Artifacts, DefaultArtifactsBytes)
	l.Queues = cmp.Or(l.Queues, DefaultQueueBytes)
	l.Saga = cmp.Or(l.Saga, DefaultSagaBytes)
	l.Outbox = cmp.Or(l.Outbox, DefaultOutboxBytes)
	return l
}

// Validate says, one sentence each, which limit is out of its range (0 is the default).
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		n    int64
	}{{"Runs", l.Runs}, {"Memo", l.Memo}, {"Buckets", l.Buckets}, {"Artifacts", l.Artifacts}, {"Queues", l.Queues}, {"Saga", l.Saga}, {"Outbox", l.Outbox}} {
		if f.n != 0 && f.n < MinLimitBytes {
			errs = append(errs, fmt.Errorf("limit %s is %d bytes, less than %d (0: the default)", f.name, f.n, MinLimitBytes))
		}
	}
	return errors.Join(errs...)
}
