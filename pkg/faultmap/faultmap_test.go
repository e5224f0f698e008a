package faultmap_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/retrypolicy"
	"github.com/cairnhq/cairn/pkg/faultmap"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// defaults are the settings' defaults (DESIGN.md, "Configuration").
func defaults() faultmap.Settings {
	return faultmap.Settings{RetryAttempts: 3, LoopGuard: 3, MaxDeliver: 20, RateLimits: map[string]float64{"CAIRN_MODEL_RPS": 5}}
}

func TestRealPipelineHasNoGaps(t *testing.T) {
	t.Parallel()
	for _, approval := range [][]string{nil, {night.DebitNotes}} { // cairn dev, then production
		s := defaults()
		s.ApprovalSteps = approval
		m, err := faultmap.Analyze(night.Pipeline, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Gaps) != 0 || m.Err() != nil {
			t.Errorf("approval %v: gaps %+v (err %v), want none", approval, m.Gaps, m.Err())
		}
		if got, want := len(m.Steps), len(night.Pipeline.Steps); got != want {
			t.Fatalf("%d steps in the map, want %d", got, want)
		}
		for _, st := range m.Steps {
			if want := slices.Contains(approval, st.Name); st.Approval != want {
				t.Errorf("approval %v: step %s waits %t, want %t", approval, st.Name, st.Approval, want)
			}
			if !st.Checkpoints {
				t.Errorf("step %s checkpoints nothing", st.Name)
			}
		}
		var out bytes.Buffer
		if err := m.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(out.String(), "\ngaps: none\n") {
			t.Errorf("text does not end with gaps: none:\n%s", out.String())
		}
		// The shared retry policy, as the runner has it, and the jitter bounds of its waits.
		for _, want := range []string{retrypolicy.Item(3).String(), retrypolicy.Attempt().String(), outbox.RetryPolicy(outbox.DefaultMaxBackoff).String(), "±10%",
			"3 tries per item (waits 90ms–110ms, 180ms–220ms)", "× 3 attempts (waits 1.8s–2.2s, 3.6s–4.4s)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("text does not show %q:\n%s", want, out.String())
			}
		}
	}
}

// bad has one of each gap, each on a step of its own (the approval gap is on the name the
// setting gives).
var bad = pipeline.Definition{Name: "bad", Steps: []pipeline.Step{
	{Name: "scan", Kind: pipeline.SnapshotRead, Leased: true},
	{Name: "ask", Kind: pipeline.ModelCall, Leased: true, Checkpoint: "answers", Effects: "model call"},
	{Name: "price", Kind: pipeline.ModelCall, Leased: true, Checkpoint: "prices", Effects: "pricing call", Memo: "memo bucket",
		ItemRetries: true, RateLimit: "PRICER_RPS"},
	{Name: "notify", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Checkpoint: "keys", Effects: "mail",
		Key: "<run>:notify", Compensation: "withdrawal note", ItemRetries: true},
	{Name: "post", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Checkpoint: "keys", Effects: "ledger rows",
		Compensation: "reversal", ItemRetries: true},
	{Name: "stock", Kind: pipeline.BusinessWrite, Leased: true, Checkpoint: "keys", Effects: "stock rows",
		Key: "<run>:stock:<line>", Compensation: "reversal", ItemRetries: true},
	{Name: "hook", Kind: pipeline.OutsideMessage, Leased: true, Checkpoint: "keys", Effects: "webhook",
		Key: "<run>:hook"},
}}

// A message step declared irreversible (what goes out stays out, as a.Queue's messages) has
// no compensation to miss: no gap, and the map says none is possible (issue 34).
func TestIrreversibleMessageNeedsNoCompensation(t *testing.T) {
	t.Parallel()
	def := pipeline.Definition{Name: "mailer", Steps: []pipeline.Step{
		{Name: "send", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Checkpoint: "keys", Effects: "mail", Key: "<run>:mail:<to>"},
	}}
	m, err := faultmap.Analyze(def, defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range m.Gaps {
		if g.Kind == faultmap.NoCompensation {
			t.Errorf("gap %s on %s: %s", g.Kind, g.Step, g.Detail)
		}
	}
	var out strings.Builder
	if err := m.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "none possible (irreversible") {
		t.Errorf("the map does not say no compensation is possible:\n%s", out.String())
	}
}

func badSettings() faultmap.Settings {
	s := defaults()
	s.RateLimits = map[string]float64{"PRICER_RPS": 2}
	s.ApprovalSteps = []string{"notify", "notfiy"}
	return s
}

func TestBadPipelineEveryGap(t *testing.T) {
	t.Parallel()
	m, err := faultmap.Analyze(bad, badSettings())
	if err != nil {
		t.Fatal(err)
	}
	type found struct {
		kind faultmap.GapKind
		step string
	}
	want := []found{
		{faultmap.SnapshotNotSaved, "scan"},
		{faultmap.NoMemo, "ask"},
		{faultmap.OverRateLimit, "price"},
		{faultmap.IrreversibleFirst, "notify"},
		{faultmap.NoKey, "post"},
		{faultmap.UnfencedWrite, "stock"},
		{faultmap.NoCompensation, "hook"},
		{faultmap.UnknownApprovalStep, "notfiy"},
	}
	var got []found
	for _, g := range m.Gaps {
		got = append(got, found{g.Kind, g.Step})
		if !strings.Contains(g.Detail, g.Step) {
			t.Errorf("gap %s does not name its step %s: %q", g.Kind, g.Step, g.Detail)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("gaps\n got %v\nwant %v", got, want)
	}
	for _, g := range m.Gaps {
		if g.Kind == faultmap.IrreversibleFirst && !strings.Contains(g.Detail, "post, stock") {
			t.Errorf("the ordering gap does not name the reversible writes after it: %q", g.Detail)
		}
	}
	err = m.Err()
	if !errors.Is(err, faultmap.ErrGaps) || !strings.Contains(err.Error(), "8 found in pipeline bad") {
		t.Errorf("Err() = %v, want ErrGaps naming 8", err)
	}
	var out bytes.Buffer
	if err := m.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	_, gaps, ok := strings.Cut(text, "\ngaps: 8\n")
	if !ok {
		t.Fatalf("no gaps: 8 in the text:\n%s", text)
	}
	for _, f := range want {
		if !strings.Contains(gaps, f.step) || !strings.Contains(gaps, string(f.kind)) {
			t.Errorf("the text's gaps do not show %s on %s:\n%s", f.kind, f.step, gaps)
		}
	}
}

func TestRetryWorstCase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		retries, guard, maxDeliver  int
		itemRetries                 bool
		tries, attempts, calls, cap int
		ms                          int64
		peak                        int
		tryWaits, attemptWaits      []int64
	}{
		{"defaults, item retries", 3, 3, 20, true, 3, 3, 9, 57, 7590, 3, []int64{100, 200}, []int64{2000, 4000}},
		{"defaults, one call an attempt", 3, 3, 20, false, 1, 3, 3, 19, 6600, 1, []int64{}, []int64{2000, 4000}},
		{"six tries, one attempt", 6, 1, 20, true, 6, 1, 6, 114, 3410, 4, []int64{100, 200, 400, 800, 1600}, []int64{}},
		{"max deliver below the loop guard", 2, 5, 2, true, 2, 1, 2, 2, 110, 2, []int64{100}, []int64{}},
		{"capped attempt waits", 1, 7, 20, true, 1, 7, 7, 19, 93000, 1, []int64{}, []int64{2000, 4000, 8000, 16000, 30000, 30000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := pipeline.Definition{Name: "one", Steps: []pipeline.Step{{Name: "s", Kind: pipeline.Compute, ItemRetries: tt.itemRetries}}}
			m, err := faultmap.Analyze(d, faultmap.Settings{RetryAttempts: tt.retries, LoopGuard: tt.guard, MaxDeliver: tt.maxDeliver})
			if err != nil {
				t.Fatal(err)
			}
			r := m.Steps[0].Retry
			if r.TriesPerAttempt != tt.tries || r.Attempts != tt.attempts || r.WorstCalls != tt.calls || r.CrashCapCalls != tt.cap ||
				r.WorstMS != tt.ms || r.PeakPerSecond != tt.peak || !slices.Equal(r.TryBackoffMS, tt.tryWaits) || !slices.Equal(r.AttemptBackoffMS, tt.attemptWaits) {
				t.Errorf("retry %+v, want tries %d attempts %d calls %d cap %d ms %d peak %d waits %v / %v",
					r, tt.tries, tt.attempts, tt.calls, tt.cap, tt.ms, tt.peak, tt.tryWaits, tt.attemptWaits)
			}
			// The bounds are the runner's own policies' (±10%, never past the cap).
			item, attempt := retrypolicy.Item(tt.retries), retrypolicy.Attempt()
			for i, b := range r.TryBackoffBoundsMS {
				if lo, hi := item.Bounds(i); b != [2]int64{lo.Milliseconds(), hi.Milliseconds()} || b[0] != tt.tryWaits[i]*9/10 {
					t.Errorf("try wait %d: bounds %v, the runner's %s–%s", i, b, lo, hi)
				}
			}
			for i, b := range r.AttemptBackoffBoundsMS {
				if lo, hi := attempt.Bounds(i + 1); b != [2]int64{lo.Milliseconds(), hi.Milliseconds()} || b[1] > 30000 {
					t.Errorf("attempt wait %d: bounds %v, the runner's %s–%s", i, b, lo, hi)
				}
			}
		})
	}
}

func TestRateLimitBoundary(t *testing.T) {
	t.Parallel()
	d := pipeline.Definition{Name: "one", Steps: []pipeline.Step{{Name: "ask", Kind: pipeline.ModelCall, Leased: true,
		Checkpoint: "answers", Effects: "model call", Memo: "memo", ItemRetries: true, RateLimit: "RPS"}}}
	for _, tt := range []struct {
		rps  float64
		gaps int
	}{{3, 0}, {2.5, 1}, {1, 1}} {
		s := defaults()
		s.RateLimits = map[string]float64{"RPS": tt.rps}
		m, err := faultmap.Analyze(d, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Gaps) != tt.gaps {
			t.Errorf("%g calls per second: gaps %+v, want %d (3 tries in 300ms)", tt.rps, m.Gaps, tt.gaps)
		}
	}
}

func TestAnalyzeRefuses(t *testing.T) {
	t.Parallel()
	one := func(st pipeline.Step) pipeline.Definition {
		return pipeline.Definition{Name: "one", Steps: []pipeline.Step{st}}
	}
	for _, tt := range []struct {
		name string
		d    pipeline.Definition
		s    faultmap.Settings
		want string
	}{
		{"unknown rate limit", one(pipeline.Step{Name: "ask", Kind: pipeline.ModelCall, RateLimit: "NOPE"}), defaults(), "rate limit NOPE"},
		{"invalid definition", pipeline.Definition{Name: "empty"}, defaults(), "no steps"},
		{"negative retries", one(pipeline.Step{Name: "a"}), faultmap.Settings{RetryAttempts: -1}, "retry attempts"},
		{"zero rate", one(pipeline.Step{Name: "a"}), faultmap.Settings{RateLimits: map[string]float64{"RPS": 0}}, "rate limit RPS"},
	} {
		if _, err := faultmap.Analyze(tt.d, tt.s); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one naming %q", tt.name, err, tt.want)
		}
	}
}

func TestJSONShape(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    pipeline.Definition
		s    faultmap.Settings
		gaps int
	}{{night.Pipeline, defaults(), 0}, {bad, badSettings(), 8}} {
		m, err := faultmap.Analyze(tt.d, tt.s)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Pipeline string                       `json:"pipeline"`
			Settings map[string]json.RawMessage   `json:"settings"`
			Steps    []map[string]json.RawMessage `json:"steps"`
			Gaps     []map[string]string          `json:"gaps"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"gaps":[`)) {
			t.Errorf("%s: gaps is not an array: %s", tt.d.Name, b)
		}
		if got.Pipeline != tt.d.Name || len(got.Steps) != len(tt.d.Steps) || len(got.Gaps) != tt.gaps {
			t.Fatalf("%s: pipeline %q, %d steps, %d gaps: %s", tt.d.Name, got.Pipeline, len(got.Steps), len(got.Gaps), b)
		}
		for _, k := range []string{"retry_attempts", "loop_guard", "max_deliver", "approval_steps", "rate_limits"} {
			if _, ok := got.Settings[k]; !ok {
				t.Errorf("%s: settings have no %q", tt.d.Name, k)
			}
		}
		stepKeys := []string{"n", "name", "kind", "leased", "fenced", "irreversible", "recovery", "checkpoints", "checkpoint",
			"effects", "key", "memo", "compensation", "retry", "approval"}
		for _, st := range got.Steps {
			for _, k := range stepKeys {
				if _, ok := st[k]; !ok {
					t.Errorf("%s: step %s has no %q", tt.d.Name, st["name"], k)
				}
			}
			var r map[string]json.RawMessage
			if err := json.Unmarshal(st["retry"], &r); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"tries_per_attempt", "try_backoff_ms", "attempts", "attempt_backoff_ms", "worst_case_calls",
				"worst_case_ms", "crash_cap_calls", "peak_calls_per_second", "rate_limit", "rate_limit_per_second",
				"try_backoff_bounds_ms", "attempt_backoff_bounds_ms", "jitter"} {
				if _, ok := r[k]; !ok {
					t.Errorf("%s: retry of step %s has no %q", tt.d.Name, st["name"], k)
				}
			}
		}
		for _, g := range got.Gaps {
			if g["kind"] == "" || g["step"] == "" || g["detail"] == "" {
				t.Errorf("%s: gap %v lacks a kind, step or detail", tt.d.Name, g)
			}
		}
	}
}

// The drift points come from the definition: the source step, the steps that check it
// after a break, and a gap for a step that writes after the source is read without checking.
func TestDriftPoints(t *testing.T) {
	t.Parallel()
	m, err := faultmap.Analyze(night.Pipeline, defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range m.Steps {
		want := faultmap.DriftAfterBreak
		if st.Name == night.Fetch {
			want = faultmap.DriftSource
		}
		if st.Drift != want {
			t.Errorf("step %s drift %q, want %q", st.Name, st.Drift, want)
		}
	}
	d := pipeline.Definition{Name: "drift", Steps: []pipeline.Step{
		{Name: "read", Kind: pipeline.SourceRead, Leased: true, Checkpoint: "list"},
		{Name: "post", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Checkpoint: "keys", Effects: "rows", Key: "k", Compensation: "rev"},
	}}
	m, err = faultmap.Analyze(d, defaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Gaps) != 1 || m.Gaps[0].Kind != faultmap.UncheckedDrift || m.Gaps[0].Step != "post" {
		t.Errorf("gaps %+v, want one %s on post", m.Gaps, faultmap.UncheckedDrift)
	}
	d.Steps[1].ChecksSource = true
	if m, err = faultmap.Analyze(d, defaults()); err != nil || len(m.Gaps) != 0 {
		t.Errorf("with its check: gaps %+v (%v), want none", m.Gaps, err)
	}
}

// A rate limit with a shared limit says so, from the limit itself; one without says each
// process keeps it alone; a shared limit that keeps another rate is refused.
func TestSharedLimit(t *testing.T) {
	t.Parallel()
	d := pipeline.Definition{Name: "one", Steps: []pipeline.Step{{Name: "ask", Kind: pipeline.ModelCall, Leased: true,
		Checkpoint: "answers", Effects: "model call", Memo: "memo", ItemRetries: true, RateLimit: "RPS"}}}
	l := ratelimit.Limit{Bucket: "limits", Key: "ask", PerSecond: 5, Burst: 1}
	s := defaults()
	s.RateLimits = map[string]float64{"RPS": 5}
	alone, err := faultmap.Analyze(d, s)
	if err != nil {
		t.Fatal(err)
	}
	s.SharedLimits = map[string]ratelimit.Limit{"RPS": l}
	shared, err := faultmap.Analyze(d, s)
	if err != nil {
		t.Fatal(err)
	}
	if got := alone.Steps[0].Retry.SharedLimit; got != "" {
		t.Errorf("without a shared limit: %q, want none", got)
	}
	if got := shared.Steps[0].Retry.SharedLimit; got != l.String() || !strings.Contains(got, "shared by every instance") {
		t.Errorf("shared limit %q, want %q", got, l.String())
	}
	for m, want := range map[*faultmap.Map]string{&alone: "5 calls per second, kept by each process alone", &shared: l.String()} {
		var b strings.Builder
		if err := m.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "RPS = "+want) {
			t.Errorf("the text lacks %q:\n%s", "RPS = "+want, b.String())
		}
	}
	s.SharedLimits = map[string]ratelimit.Limit{"RPS": {Bucket: "limits", Key: "ask", PerSecond: 4}}
	if _, err := faultmap.Analyze(d, s); err == nil || !strings.Contains(err.Error(), "shared limit keeps 4") {
		t.Errorf("a shared limit of 4 for a rate limit of 5: %v, want refused", err)
	}
}

// A step whose loop guard counts progress takes one attempt more on an item that always
// fails (the first attempt made the items before it), within the delivery limit; the text
// says the rule.
func TestRetryCountsProgress(t *testing.T) {
	t.Parallel()
	d := pipeline.Definition{Name: "one", Steps: []pipeline.Step{{Name: "s", Kind: pipeline.Compute}, {Name: "t", Kind: pipeline.Compute}}}
	for _, tt := range []struct {
		guard, maxDeliver, counted, plain int
	}{{3, 20, 4, 3}, {1, 20, 2, 1}, {5, 3, 2, 2}} {
		s := faultmap.Settings{LoopGuard: tt.guard, MaxDeliver: tt.maxDeliver, ProgressSteps: []string{"s"}}
		m, err := faultmap.Analyze(d, s)
		if err != nil {
			t.Fatal(err)
		}
		c, p := m.Steps[0].Retry, m.Steps[1].Retry
		if !c.ProgressCounted || c.Attempts != tt.counted || p.ProgressCounted || p.Attempts != tt.plain {
			t.Errorf("guard %d, max deliver %d: counted %+v, plain %+v; want %d and %d attempts", tt.guard, tt.maxDeliver, c, p, tt.counted, tt.plain)
		}
		var out bytes.Buffer
		if err := m.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			fmt.Sprintf("handed over after %d attempts in a row without progress", tt.guard),
			fmt.Sprintf("max deliver (%d attempts) and crashes at 5 reassignments without progress", tt.maxDeliver-1),
			fmt.Sprintf("handed over at %d failed attempts", tt.guard),
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the text lacks %q:\n%s", want, out.String())
			}
		}
	}
}

// The map answers "what if the job runs twice on the same input" from the pipeline's
// natural key, and says so when there is none.
func TestTwiceOnTheSameInput(t *testing.T) {
	m, err := faultmap.Analyze(night.Pipeline, defaults())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Twice, "one run") || !strings.Contains(m.Twice, night.Pipeline.NaturalKey) || !strings.Contains(m.Twice, "refused on cairn.rejected") {
		t.Errorf("the night's answer: %q", m.Twice)
	}
	var b strings.Builder
	if err := m.WriteText(&b); err != nil || !strings.Contains(b.String(), "started twice on the same input: one run") {
		t.Errorf("the text map does not answer it (%v):\n%s", err, b.String())
	}
	bare := night.Pipeline
	bare.NaturalKey = ""
	if m, err = faultmap.Analyze(bare, defaults()); err != nil || !strings.Contains(m.Twice, "two runs") {
		t.Errorf("without a natural key: %q, %v", m.Twice, err)
	}
}

// The answer to "started twice" names the pipeline's own buckets and subjects: a hosted
// pipeline's space, the night's default one.
func TestTwiceNamesThePipelinesSpace(t *testing.T) {
	for name, want := range map[string]string{"copy": "cairn-copy-natural-keys", "invoice-reconciliation": "in cairn-natural-keys"} {
		d := pipeline.Definition{Name: name, NaturalKey: "the file", Steps: []pipeline.Step{{Name: "read", Kind: pipeline.SourceRead, Recovery: "again"}}}
		m, err := faultmap.Analyze(d, faultmap.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m.Twice, want) {
			t.Errorf("%s: %q lacks %q", name, m.Twice, want)
		}
	}
}

// The map shows the graph: what each step runs after, and which run beside it.
func TestMapShowsTheGraph(t *testing.T) {
	t.Parallel()
	d := pipeline.Definition{Name: "fan", Steps: []pipeline.Step{
		{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
		{Name: "profile", Kind: pipeline.Compute, After: []string{"fetch"}},
		{Name: "geo", Kind: pipeline.Compute, After: []string{"fetch"}},
		{Name: "validate", Kind: pipeline.Compute, After: []string{"profile", "geo"}},
	}}
	m, err := faultmap.Analyze(d, defaults())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2][]string{
		"fetch":    {{}, {}},
		"profile":  {{"fetch"}, {"geo"}},
		"geo":      {{"fetch"}, {"profile"}},
		"validate": {{"profile", "geo"}, {}},
	}
	for _, st := range m.Steps {
		w := want[st.Name]
		if !slices.Equal(st.After, w[0]) || !slices.Equal(st.Beside, w[1]) {
			t.Errorf("%s: after %v beside %v, want after %v beside %v", st.Name, st.After, st.Beside, w[0], w[1])
		}
	}
	var b bytes.Buffer
	if err := m.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	var js struct {
		Steps []struct {
			Name   string   `json:"name"`
			After  []string `json:"after"`
			Beside []string `json:"beside"`
		} `json:"steps"`
	}
	raw, _ := json.Marshal(m)
	if err := json.Unmarshal(raw, &js); err != nil || js.Steps[3].Name != "validate" || !slices.Equal(js.Steps[3].After, []string{"profile", "geo"}) || js.Steps[0].Beside == nil {
		t.Errorf("the map's JSON steps %+v (%v): want validate after profile and geo, and beside always a list", js.Steps, err)
	}
}

// Observe times each step by the records of recent runs: the median and the longest of its
// verified attempts, and the attempts that failed or restarted; a crash of a step that
// saves only at its commit loses up to the longest.
func TestObserveRecentRuns(t *testing.T) {
	t.Parallel()
	d := pipeline.Definition{Name: "two", Steps: []pipeline.Step{
		{Name: "read", Kind: pipeline.SourceRead},
		{Name: "ask", Kind: pipeline.ModelCall, Effects: "a paid call", Memo: "<run>.<item>"},
	}}
	m, err := faultmap.Analyze(d, defaults())
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, readMS, askMS int, askAttempts int) *kc.Record {
		r := kc.New(id, kc.StringParams(false, "x", "1"), d.Names(), "2026-12-03T10:00:00Z")
		for name, took := range map[string]int{"read": readMS, "ask": askMS} {
			s := r.Step(name)
			s.Status = kc.Verified
			s.StartedAt = kc.Ptr("2026-12-03T10:00:00Z")
			s.FinishedAt = kc.Ptr(time.Date(2026, 12, 3, 10, 0, 0, took*1_000_000, time.UTC).Format(time.RFC3339Nano))
		}
		r.Step("ask").Attempts = askAttempts
		return r
	}
	pending := kc.New("r-4", kc.StringParams(false, "x", "1"), d.Names(), "2026-12-03T10:00:00Z")
	m.Observe([]*kc.Record{run("r-1", 100, 2000, 0), run("r-2", 300, 5000, 2), run("r-3", 200, 1000, 0), pending})
	if m.RunsRead != 4 {
		t.Errorf("runs read %d, want 4", m.RunsRead)
	}
	want := map[string]faultmap.Observed{
		"read": {Runs: 3, MedianMS: 200, MaxMS: 300},
		"ask":  {Runs: 3, MedianMS: 2000, MaxMS: 5000, Retried: 2},
	}
	for _, st := range m.Steps {
		if st.Observed == nil || *st.Observed != want[st.Name] {
			t.Errorf("%s observed %+v, want %+v", st.Name, st.Observed, want[st.Name])
		}
	}
	var b bytes.Buffer
	if err := m.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "up to 300ms, its attempt so far") {
		t.Errorf("the map does not say a crash of read loses up to 300ms:\n%s", b.String())
	}
}
