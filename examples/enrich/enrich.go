// Package enrich is a long job of someone else's, put on Cairn with the public API alone
// (it imports nothing of Cairn's internal packages): fetch records from a file, enrich each
// from three HTTP APIs side by side (a slow one, a rate-limited one, one that times out),
// validate, transform, and upload each to an outside system that enforces an idempotency
// key and a fencing token.
//
// What Cairn gives it, with nothing written by hand for it:
//   - every step's output is a verified checkpoint, so a restart resumes at the step that
//     failed and repeats none before it;
//   - every API answer is memoised (Attempt.Memo), so an answer received once is never
//     asked for again, and no rate limit is burnt twice;
//   - every upload is keyed and fenced (Attempt.Keyed with pkg/httpidem's client), so a
//     record is uploaded once however often the upload step restarts, and a zombie worker's
//     late upload is refused by the upload system;
//   - a run that cannot go on (the loop guard, a refused key) is handed to a person.
//
// What it writes itself: the definition (Pipeline), one runner.Step per step, and the
// calls to its outside systems (package records).
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

// The job's steps, in order.
const (
	Fetch     = "fetch"
	Enrich    = "enrich"
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
			Name: Enrich, Kind: pipeline.ModelCall, Leased: true, Recovery: "each answer memoised; a record answered once is never asked again",
			Checkpoint:  "every answer word for word (cairn-enrich-memo), then the enriched records",
			Effects:     "three API calls per record, side by side: profile (slow), geo (rate-limited), risk (times out on some records)",
			Memo:        "cairn-enrich-memo, key <run>.<api>.<record id>, read before the call, saved with Create; the call is on the timeline (memo.called) before it is made",
			ItemRetries: true, RateLimit: RateSetting,
		},
		{
			Name: Validate, Kind: pipeline.Compute, Recovery: "recomputed from the saved enrichment",
			Checkpoint: "the valid records; each invalid one parked with its reason",
		},
		{
			Name: Transform, Kind: pipeline.Compute, Recovery: "recomputed from the saved valid records",
			Checkpoint: "the records as the upload system takes them",
		},
		{
			Name: Upload, Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, ChecksSource: true, Recovery: "keys enforced by the upload system; fenced; after a break, only while the records file is what fetch read",
			Checkpoint:  "every upload's receipt (status, reference)",
			Effects:     "one row per record in the upload system",
			Key:         "<run>:upload:<record id>, the Idempotency-Key the upload system enforces (same payload: the stored answer; another: 422, handover); fenced by the run's token (Cairn-Run, Cairn-Fence-Token)",
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
