package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// updateContract re-captures testdata/night-contract.golden from this tree's night: run it
// only in a checkout whose contracts are the ones to keep.
//
//	go test -run TestNightContractsUnchanged ./e2e -args -update-contract
var updateContract = flag.Bool("update-contract", false, "write testdata/night-contract.golden from this tree's night")

// contractGolden is the night's contract surface as the release before the one host wrote it
// (captured at 230ecf4, before the night's services were made by pkg/app).
var contractGolden = absPath("testdata", "night-contract.golden")

// The night's contracts do not move when its services are made by the framework's host: a
// small night run by `cairn dev` leaves the same streams (names and subjects), durables,
// buckets, the same shapes of keys and message subjects, and a record with the same fields,
// as the release before (testdata/night-contract.golden). Run ids, digests and numbers are
// replaced by their shape, so the comparison holds across data.
func TestNightContractsUnchanged(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNightOf(t, 12, 3, 0)
	n.start()
	n.startRun()
	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done {
		t.Fatalf("status %s: %s", rec.Status, rec.NextAction)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := contractSurface(ctx, t, n.js)
	if *updateContract {
		if err := os.WriteFile(contractGolden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(contractGolden)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing from this release's night: %s", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("new in this release's night: %s", g)
		}
	}
}

// shapes replace what varies between nights by what it is.
var shapes = []struct {
	re  *regexp.Regexp
	new string
}{
	{regexp.MustCompile(regexp.QuoteMeta(runID)), "RUN"},
	{regexp.MustCompile(`[0-9a-f]{16,}`), "HEX"},
	{regexp.MustCompile(`[A-Za-z0-9_-]{43}=?`), "B64"},
	{regexp.MustCompile(`[0-9]+`), "N"},
}

func shape(s string) string {
	for _, sh := range shapes {
		s = sh.re.ReplaceAllString(s, sh.new)
	}
	return s
}

// contractSurface is what an operator sees of the night on NATS, a line each, sorted: every
// stream with its subjects and the shapes of the subjects its messages hold, every durable,
// every bucket with the shapes of its keys, and the fields of the run's record.
func contractSurface(ctx context.Context, t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	add := func(format string, args ...any) {
		if l := fmt.Sprintf(format, args...); !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		name := info.Config.Name
		subjects := slices.Clone(info.Config.Subjects)
		slices.Sort(subjects)
		add("stream %s subjects %s retention %s", name, strings.Join(subjects, " "), info.Config.Retention)
		if strings.HasPrefix(name, "KV_") || strings.HasPrefix(name, "OBJ_") || info.Config.Retention == jetstream.WorkQueuePolicy {
			// A bucket's keys are listed below; a work queue keeps only what waits.
		} else {
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
				st, err := js.Stream(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				m, err := st.GetMsg(ctx, seq)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if err != nil {
					t.Fatalf("stream %s seq %d: %v", name, seq, err)
				}
				add("stream %s message %s", name, shape(m.Subject))
			}
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for c := range st.ListConsumers(ctx).Info() {
			if c.Config.Durable != "" {
				add("stream %s durable %s filter %s", name, c.Config.Durable, strings.Join(append([]string{c.Config.FilterSubject}, c.Config.FilterSubjects...), " "))
			}
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range js.KeyValueStoreNames(ctx).Name() {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		add("bucket %s", name)
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys.Keys() {
			add("bucket %s key %s", name, shape(k))
		}
	}
	for name := range js.ObjectStoreNames(ctx).Name() {
		add("object store %s", name)
	}
	kv, err := js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	for _, f := range fieldPaths("", rec) {
		add("record %s", f)
	}
	slices.Sort(out)
	return out
}

// fieldPaths are the paths of v's members, a step's under steps.STEP (steps are the night's,
// named alike in every night), an array's members under [].
func fieldPaths(prefix string, v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, m := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, p)
			out = append(out, fieldPaths(p, m)...)
		}
	case []any:
		for _, m := range v {
			out = append(out, fieldPaths(prefix+"[]", m)...)
		}
	}
	return out
}
