// Package enrich is a long job of someone else's, put on Cairn with the public API alone
// (it imports nothing of Cairn's internal packages): fetch records from a file, enrich each
// from three HTTP APIs in three steps that run side by side (profile: slow; geo:
// rate-limited; risk: times out on some records), validate the records once all three
// are verified, transform, and upload each to an outside system that enforces an
// idempotency key and a fencing token.
//
//	fetch ─┬─ profile ─┬─ validate ── transform ── upload
//	       ├─ geo ─────┤
//	       └─ risk ────┘
//
// What Cairn gives it, with nothing written by hand for it:
//   - every step's output is a verified checkpoint, so a restart resumes at the step that
//     failed and repeats none before it, nor any beside it: when risk fails, profile and
//     geo, verified on their own, are not run again;
//   - the three enrichment steps wait only for fetch (pipeline.Step.After), so they run at
//     once, lease-free, and validate runs once, when the last of them is verified;
//   - every API answer is memoised (Attempt.Memo), so an answer received once is never
//     asked for again, and no rate limit is burnt twice;
//   - every upload is keyed and fenced (Attempt.Keyed with pkg/httpidem's client), so a
//     record is uploaded once however often the upload step restarts, and a zombie worker's
//     late upload is refused by the upload system;
//   - a run that cannot go on (the loop guard, a refused key) is handed to a person;
//   - an undo (of the run, or of chosen records: cairn undo --attr record=<id>) reverses the uploads
//     newest first through the upload system's reversal (Systems), each once, resuming
//     where it stopped after a crash.
//
// What it writes itself: the definition (Pipeline), one runner.Step per step, the
// reversal of an upload (UploadSystem), and the calls to its outside systems (package
// records).
package enrich

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// The job's steps, in the order declared: profile, geo and risk run side by side after
// fetch, validate after the three.
const (
	Fetch     = "fetch"
	Profile   = "profile"
	Geo       = "geo"
	Risk      = "risk"
	Validate  = "validate"
	Transform = "transform"
	Upload    = "upload"
)

// RateSetting names the setting of the geo API's declared rate (Config.GeoRate), kept for
// every instance at once in cairn-enrich-limits; a 429's Retry-After is held for all of them.
const RateSetting = "ENRICH_GEO_RPS"

// ParamSource is the one member of a run's input: the path of the records file.
const ParamSource = "source"

// Space is the job's share of the NATS account, named after it: its streams (CAIRN_ENRICH_*),
// buckets (cairn-enrich-*) and subjects (cairn.enrich.*), beside the reference night's or any
// other pipeline's on the same NATS.
var Space = assets.MustSpace(Pipeline.Name)

// Pipeline is the job's definition: each step's kind decides how it recovers, and what it
// declares the runner checks against what it does (a fenced step raises fences, a call is
// memoised, a write names its key).
var Pipeline = pipeline.Definition{
	Name:       "enrich",
	Input:      []string{ParamSource},
	CheckInput: checkInput,
	NaturalKey: "the records file; a second start of the same file is refused, naming the first run",
	Steps: []pipeline.Step{
		{
			Name: Fetch, Kind: pipeline.SourceRead, Leased: true, Recovery: "cheap to repeat",
			Checkpoint: "the records read, with the file's sha256: the source fingerprint upload checks after a break",
		},
		{
			Name: Profile, Kind: pipeline.ModelCall, After: []string{Fetch}, Recovery: "each answer memoised; a record answered once is never asked again",
			Checkpoint:  "every answer word for word (cairn-enrich-memo), then each record's segment",
			Effects:     "one call per record to the profile API (slow), beside geo and risk",
			Memo:        "cairn-enrich-memo, key <run>.profile.<record id>, read before the call, saved with Create; the call is on the timeline (memo.called) before it is made",
			ItemRetries: true,
		},
		{
			Name: Geo, Kind: pipeline.ModelCall, After: []string{Fetch}, Recovery: "each answer memoised; a record answered once is never asked again, so no rate limit is burnt twice",
			Checkpoint:  "every answer word for word (cairn-enrich-memo), then each record's region and timezone",
			Effects:     "one call per record to the geo API (rate-limited: 429 with Retry-After, held for every instance), beside profile and risk",
			Memo:        "cairn-enrich-memo, key <run>.geo.<record id>, read before the call, saved with Create; the call is on the timeline (memo.called) before it is made",
			ItemRetries: true, RateLimit: RateSetting,
		},
		{
			Name: Risk, Kind: pipeline.ModelCall, After: []string{Fetch}, Recovery: "each answer memoised; a record answered once is never asked again; a retry resumes at the record that timed out, profile and geo untouched",
			Checkpoint:  "every answer word for word (cairn-enrich-memo), then each record's score",
			Effects:     "one call per record to the risk API (times out on some records), beside profile and geo",
			Memo:        "cairn-enrich-memo, key <run>.risk.<record id>, read before the call, saved with Create; the call is on the timeline (memo.called) before it is made",
			ItemRetries: true,
		},
		{
			Name: Validate, Kind: pipeline.Compute, After: []string{Profile, Geo, Risk}, Recovery: "recomputed from the saved records and enrichments",
			Checkpoint: "the records enriched from the three steps' outputs, the valid ones; each invalid one parked with its reason",
		},
		{
			Name: Transform, Kind: pipeline.Compute, Recovery: "recomputed from the saved valid records",
			Checkpoint: "the records as the upload system takes them",
		},
		{
			Name: Upload, Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, ChecksSource: true, Recovery: "keys enforced by the upload system; fenced; after a break, only while the records file is what fetch read",
			Checkpoint: "every upload's receipt (status, reference)",
			Effects:    "one row per record in the upload system",
			Key:        "<run>:upload:<record id>, the Idempotency-Key the upload system enforces (same payload: the stored answer; another: 422, handover); fenced by the run's token (Cairn-Run, Cairn-Fence-Token)",
			Compensation: "each upload reversed by the upload system (POST /v1/uploads/<key>/reversal, keyed <key>:rev, fenced by the undo's token): the row stays, marked reversed, once however often the undo is repeated; " +
				"an upload that never landed has nothing to reverse; cairn undo RUN --pipeline enrich --attr record=<id> reverses that record's alone",
			ItemRetries: true,
		},
	},
}

// checkInput takes a start whose source is a path string, and nothing else.
func checkInput(input map[string]json.RawMessage) error {
	var errs []error
	for name := range input {
		if name != ParamSource {
			errs = append(errs, fmt.Errorf("unknown member %q (the job takes %q)", name, ParamSource))
		}
	}
	var src string
	if raw, ok := input[ParamSource]; !ok {
		errs = append(errs, fmt.Errorf("%q is missing: the path of the records file", ParamSource))
	} else if err := json.Unmarshal(raw, &src); err != nil || src == "" {
		errs = append(errs, fmt.Errorf("%q must be a non-empty path string, not %s", ParamSource, raw))
	}
	return errors.Join(errs...)
}

// fileDigest is "sha256:<hex>" of the file at path.
func fileDigest(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}
