// Package rundiff compares two runs step by step: each step's checkpointed output, and the
// effects the run left in the ledger, the stock store and the outbox (DESIGN.md, "Shadow
// runs"). Run ids are replaced before comparing, and what differs by nature between two runs
// of the same data (times, tokens, generations) is left out, so a shadow run and a real run
// of the same night compare equal.
package rundiff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// Placeholder stands for either run's id in what is compared.
const Placeholder = "<run>"

// ignored are the fields that differ between any two runs of the same data.
var ignored = map[string]bool{"created_at": true, "queued_at": true, "token": true, "generation": true, "shadow": true, "CreatedAt": true, "Token": true}

// Part is one compared part: a step's output, or one kind of effect.
type Part struct {
	Name        string   `json:"name"`
	Differences []string `json:"differences"` // empty when the two runs agree
}

// Sources are where the runs' outputs and effects are read.
type Sources struct {
	JS          jetstream.JetStream
	Store       *kc.Store
	Artifacts   *artifacts.Store
	Ledger, ERP *books.DB
}

// Compare compares run a with run b.
func Compare(ctx context.Context, src Sources, a, b string) ([]Part, error) {
	ra, _, err := src.Store.Load(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", a, err)
	}
	rb, _, err := src.Store.Load(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", b, err)
	}
	var parts []Part
	for _, step := range ra.Pipeline {
		p := Part{Name: "output of " + step}
		oa, err := output(ctx, src, ra, step)
		if err != nil {
			return nil, err
		}
		ob, err := output(ctx, src, rb, step)
		if err != nil {
			return nil, err
		}
		p.Differences = diff(normalize(oa, a), normalize(ob, b), "")
		parts = append(parts, p)
	}
	for _, e := range []struct {
		name string
		read func(ctx context.Context, src Sources, r *kc.Record) (any, error)
	}{{"ledger entries", ledgerRows}, {"stock adjustments", stockRows}, {"outbox messages", messages}} {
		va, err := e.read(ctx, src, ra)
		if err != nil {
			return nil, err
		}
		vb, err := e.read(ctx, src, rb)
		if err != nil {
			return nil, err
		}
		parts = append(parts, Part{Name: e.name, Differences: diff(normalizeValue(va, a), normalizeValue(vb, b), "")})
	}
	return parts, nil
}

// output is a step's output as JSON, nil when it has none.
func output(ctx context.Context, src Sources, r *kc.Record, step string) (any, error) {
	s, ok := r.Steps[step]
	if !ok || s.Output == nil {
		return nil, nil
	}
	b, err := src.Artifacts.Load(ctx, s.Output)
	if err != nil {
		return nil, fmt.Errorf("output of %s in %s: %w", step, r.RunID, err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("output of %s in %s: %w", step, r.RunID, err)
	}
	return v, nil
}

func ledgerRows(ctx context.Context, src Sources, r *kc.Record) (any, error) {
	es, err := src.Ledger.Ledger(r.Params.Shadow).ListRun(ctx, r.RunID)
	if err != nil {
		return nil, err
	}
	out := map[string]books.Entry{}
	for _, e := range es {
		out[e.Key] = e
	}
	return out, nil
}

func stockRows(ctx context.Context, src Sources, r *kc.Record) (any, error) {
	as, err := src.ERP.Stock(r.Params.Shadow).ListRun(ctx, r.RunID)
	if err != nil {
		return nil, err
	}
	out := map[string]books.Adjustment{}
	for _, a := range as {
		out[a.Key] = a
	}
	return out, nil
}

func messages(ctx context.Context, src Sources, r *kc.Record) (any, error) {
	ms, err := supervisor.Queued(ctx, src.JS, assets.Default, nil, r.RunID)
	if err != nil {
		return nil, err
	}
	out := map[string]outbox.Message{}
	for _, m := range ms {
		out[m.Key] = m
	}
	return out, nil
}

// normalizeValue turns v into plain JSON values and normalizes them.
func normalizeValue(v any, runID string) any {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("unmarshallable: %v", err)
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return normalize(out, runID)
}

// normalize replaces the run id, in keys and values, and drops the ignored fields.
func normalize(v any, runID string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if ignored[k] {
				continue
			}
			out[strings.ReplaceAll(k, runID, Placeholder)] = normalize(e, runID)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e, runID)
		}
		return out
	case string:
		return strings.ReplaceAll(x, runID, Placeholder)
	default:
		return x
	}
}

// diff lists where a and b differ, by JSON path; at most 20 lines.
func diff(a, b any, path string) []string {
	var out []string
	walk(a, b, path, &out)
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("… and %d more", len(out)-20))
	}
	return out
}

func walk(a, b any, path string, out *[]string) {
	ma, aok := a.(map[string]any)
	mb, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range ma {
			keys[k] = true
		}
		for k := range mb {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			va, ina := ma[k]
			vb, inb := mb[k]
			switch {
			case !inb:
				*out = append(*out, fmt.Sprintf("%s.%s: only in the first run", path, k))
			case !ina:
				*out = append(*out, fmt.Sprintf("%s.%s: only in the second run", path, k))
			default:
				walk(va, vb, path+"."+k, out)
			}
		}
		return
	}
	la, aok := a.([]any)
	lb, bok := b.([]any)
	if aok && bok && len(la) == len(lb) {
		for i := range la {
			walk(la[i], lb[i], fmt.Sprintf("%s[%d]", path, i), out)
		}
		return
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		*out = append(*out, fmt.Sprintf("%s: %s ≠ %s", cmpPath(path), cut(ja), cut(jb)))
	}
}

func cmpPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func cut(b []byte) string {
	s := string(b)
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// Same reports whether no part differs.
func Same(parts []Part) bool {
	return !slices.ContainsFunc(parts, func(p Part) bool { return len(p.Differences) > 0 })
}
