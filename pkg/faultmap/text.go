package faultmap

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// WriteText writes the map for a person: the settings, a table per step, then the gaps
// ("gaps: none" when there are none).
func (m Map) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	s := m.Settings
	fmt.Fprintf(tw, "pipeline %s, %d steps\n", m.Pipeline, len(m.Steps))
	fmt.Fprintf(tw, "started twice on the same input: %s\n", m.Twice)
	fmt.Fprintf(tw, "retries: %d tries per item, loop guard %d, max deliver %d; approval: %s; rate limits: %s\n",
		s.RetryAttempts, s.LoopGuard, s.MaxDeliver, list(s.ApprovalSteps), rates(s.RateLimits))
	item, attempt := Policies(s)
	fmt.Fprintf(tw, "retry policy (package retry, shared by the runner, the compensator and the outbox): tries of an item wait %s; failed attempts come back after %s; outbox messages after %s\n",
		item, attempt, outbox.RetryPolicy(s.OutboxBackoff))
	for _, st := range m.Steps {
		fmt.Fprintf(tw, "\n%d. %s\n", st.N, st.Name)
		row := func(label, value string) { fmt.Fprintf(tw, "   %s\t%s\n", label, value) }
		row("kind", kind(st))
		row("runs after", or(strings.Join(st.After, ", "), "nothing: it starts the run"))
		if len(st.Beside) > 0 {
			row("runs beside", strings.Join(st.Beside, ", ")+": side by side, each checkpointed on its own; a failure in one repeats none of the others")
		}
		row("checkpoint", or(st.Checkpoint, "none: nothing saved, it is redone whenever needed"))
		row("outside effects", effectsText(st))
		row("safe to repeat", safeText(st))
		row("compensation", compensationText(st))
		row("recovery", or(st.Recovery, "not stated"))
		row("retries", retryText(st.Retry))
		row("loop guard", guardText(st.Retry, s))
		row("rate limit", rateText(st.Retry))
		row("approval", approvalText(st.Approval))
		row("source drift", driftText(st.Drift))
		if m.RunsRead > 0 {
			row("recent runs", observedText(st.Observed, m.RunsRead))
		}
		row("a crash loses", st.Loss)
		if m.ChaosAt != "" {
			row("last chaos run", chaosText(st.Crashes, m.ChaosAt))
		}
	}
	if len(m.Gaps) == 0 {
		fmt.Fprintln(tw, "\ngaps: none")
	} else {
		fmt.Fprintf(tw, "\ngaps: %d\n", len(m.Gaps))
		for _, g := range m.Gaps {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", g.Step, g.Kind, g.Detail)
		}
	}
	return tw.Flush()
}

func observedText(o *Observed, read int) string {
	if o == nil {
		return fmt.Sprintf("not verified in any of the %d runs read", read)
	}
	return fmt.Sprintf("took %s (the median of %d runs), %s at most; %d attempts failed or restarted", ms(o.MedianMS), o.Runs, ms(o.MaxMS), o.Retried)
}

func kind(st StepMap) string {
	parts := []string{string(st.Kind)}
	if st.Leased {
		parts = append(parts, "leased")
	} else {
		parts = append(parts, "lease-free")
	}
	if st.Fenced {
		parts = append(parts, "fenced")
	}
	if st.Irreversible {
		parts = append(parts, "irreversible")
	}
	return strings.Join(parts, ", ")
}

// def is as much of the step's definition as the rules about effects read.
func def(st StepMap) pipeline.Step {
	return pipeline.Step{Kind: st.Kind, Effects: st.Effects, Irreversible: st.Irreversible}
}

func effectsText(st StepMap) string {
	if !def(st).HasEffects() {
		return "none"
	}
	return or(st.Effects, "not named")
}

func safeText(st StepMap) string {
	switch {
	case st.Kind == pipeline.ModelCall:
		return or(st.Memo, "NOT MEMOISED")
	case !def(st).HasEffects():
		return "nothing to make safe (no outside effect)"
	default:
		return or(st.Key, "NO KEY")
	}
}

func compensationText(st StepMap) string {
	switch {
	case st.Compensation != "":
		return st.Compensation
	case st.Kind == pipeline.ModelCall:
		return "none needed (a model call changes nothing outside)"
	case !def(st).Writes():
		return "none needed (no outside effect)"
	case st.Irreversible:
		return "none possible (irreversible: what goes out stays out; it runs only on clear evidence or an approval)"
	default:
		return "NONE"
	}
}

func retryText(r Retry) string {
	per := "1 call per attempt"
	if r.TriesPerAttempt > 1 {
		per = fmt.Sprintf("%d tries per item (waits %s)", r.TriesPerAttempt, ranges(r.TryBackoffBoundsMS))
	}
	return fmt.Sprintf("%s × %d attempts (waits %s): worst case %d calls of one item in %s, at most %d in one second; crashes included, at most %d per step event",
		per, r.Attempts, ranges(r.AttemptBackoffBoundsMS), r.WorstCalls, time.Duration(r.WorstMS)*time.Millisecond, r.PeakPerSecond, r.CrashCapCalls)
}

func driftText(d string) string {
	switch d {
	case DriftSource:
		return "reads the source: its fingerprint is what later steps check"
	case DriftAfterBreak:
		return "re-hashed before the step runs whenever the run continues after a break (a resume, a rerun, a reassignment, a restart, a retry, a write since the commit); a change hands the run over naming the documents"
	}
	return "not checked here (a break here is checked by the next step that checks)"
}

// guardText is the step's loop guard rule (internal/loopguard: Next, Attempts).
func guardText(r Retry, s Settings) string {
	if !r.ProgressCounted {
		return fmt.Sprintf("handed over at %d failed attempts (crashes included), whatever they did", s.LoopGuard)
	}
	return fmt.Sprintf("handed over after %d attempts in a row without progress (what it made durable, read back; the note names "+
		"the item it is stuck at): %d attempts of an item that always fails; while it progresses, a step event's redeliveries end at "+
		"max deliver (%d attempts) and crashes at %d reassignments without progress (CAIRN_REASSIGN_LIMIT), each a handover",
		s.LoopGuard, r.Attempts, s.MaxDeliver-1, s.ReassignLimit)
}

func approvalText(waits bool) string {
	if waits {
		return "waits for a person: plan, then send once approved"
	}
	return "no"
}

func rateText(r Retry) string {
	if r.RateLimit == "" {
		return "none declared"
	}
	verdict := "within it"
	if float64(r.PeakPerSecond) > r.RateLimitPerSecond {
		verdict = "EXCEEDED"
	}
	limit := fmt.Sprintf("%g calls per second, kept by each process alone (N instances call N times the rate)", r.RateLimitPerSecond)
	if r.SharedLimit != "" {
		limit = r.SharedLimit
	}
	return fmt.Sprintf("%s = %s; retries peak at %d: %s", r.RateLimit, limit, r.PeakPerSecond, verdict)
}

func rates(r map[string]float64) string {
	if len(r) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		out = append(out, fmt.Sprintf("%s=%g/s", k, r[k]))
	}
	return strings.Join(out, ", ")
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
