package kvcheckpoint

import (
	"encoding/json"
	"fmt"
	"time"
)

// NewerSchemaRetry is how long a service leaves a message about a run of a newer schema
// (ErrNewerSchema) before it is delivered again, so that a service of the newer release,
// during a rolling upgrade, takes it first.
const NewerSchemaRetry = 5 * time.Second

// upgrades[v] turns a record of schema v, decoded into today's Record, into one of schema
// v+1. A new schema raises Schema and adds one function here; its decoder (decode.go) and
// canonical writer (canonwrite.go) learn the new fields, and a field an older schema lacks
// is filled here. upgrades[0] is unused: no record has schema 0.
var upgrades = [Schema]func(r *Record){
	1: func(r *Record) { r.UpdatedAt = r.CreatedAt }, // 1→2: updated_at, not known before: the creation
	2: func(r *Record) { r.Commands = []Command{} },  // 2→3: commands; none waited before
	3: upgrade3,                                      // 3→4: progressed_at, approval.since, progress
	4: func(*Record) {},                              // 4→5: after (null: each step after the one before, as all ran); snapshot, read from its old name
	5: func(*Record) {},                              // 5→6: prev, not known before (0); such a record is trusted only up to the seal's history (history.go)
}

// legacySnapshot is the member that held the run's snapshot before schema 5: the reference
// night's name for it, which a record of an earlier schema still carries. Schema 5 calls
// it snapshot; both decoders read the old name into Snapshot.
const legacySnapshot = "stock_snapshot"

// oldSnapshot reads the snapshot of a record of an earlier schema that encoding/json
// decoded (it knows only the new name) into r.
func oldSnapshot(b []byte, r *Record) error {
	if r.Schema >= 5 || r.Snapshot != nil {
		return nil
	}
	var old map[string]json.RawMessage
	if err := json.Unmarshal(b, &old); err != nil {
		return err
	}
	raw, ok := old[legacySnapshot]
	if !ok {
		return nil
	}
	return json.Unmarshal(raw, &r.Snapshot)
}

// checkSchema upgrades a decoded record of an earlier schema in memory; a record of a later
// schema is ErrNewerSchema, one without a valid schema ErrCorrupt.
func checkSchema(r *Record) error {
	if err := knownSchema(r.Schema); err != nil {
		return err
	}
	for v := r.Schema; v < Schema; v++ {
		upgrades[v](r)
	}
	r.Schema = Schema
	return nil
}

func knownSchema(v int) error {
	switch {
	case v < 1:
		return fmt.Errorf("%w: schema %d (missing or below 1)", ErrCorrupt, v)
	case v > Schema:
		return fmt.Errorf("%w: the record is schema %d, this release reads up to schema %d", ErrNewerSchema, v, Schema)
	}
	return nil
}

// newerSchema reports, for a record whose sum holds but which does not decode into Record,
// whether it carries a schema later than Schema: a newer release may change a field's type.
func newerSchema(b []byte) error {
	var head struct {
		Schema int `json:"schema"`
	}
	if json.Unmarshal(b, &head) == nil && head.Schema > Schema {
		return knownSchema(head.Schema)
	}
	return nil
}

// upgrade3: schema 4 adds when the run last progressed and when an approval's wait began,
// not known before: the record's last write, the latest a stored record can show. The
// loop guard's progress (null) is counted afresh by the current step's next attempt.
func upgrade3(r *Record) {
	r.ProgressedAt = r.UpdatedAt
	if r.Approval != nil {
		r.Approval.Since = r.UpdatedAt
	}
}
