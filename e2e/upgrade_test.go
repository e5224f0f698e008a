package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// captureUpgrade re-captures testdata/upgrade. Run it in a checkout of the release whose
// record the upgrade test must resume (its code writes the record), then copy the folder here:
//
//	go test -run TestUpgradeCapture ./e2e -args -capture-upgrade
var captureUpgrade = flag.Bool("capture-upgrade", false, "write testdata/upgrade from a night run by this tree's code")

// upgradeDir is the package's testdata/upgrade (absolute: see TestMain).
var upgradeDir = absPath("testdata", "upgrade")

const (
	upgradeRecord  = "record.json"    // the cairn-runs entry, byte for byte as stored
	upgradeObjects = "objects.tar.gz" // the cairn-artifacts objects the record names
	// upgradeFault stops the night at a step boundary: compare committed (lease released,
	// post-ledger pending), its process gone before post-ledger's event was published.
	upgradeFault = job.Compare + ".after-commit=exit@once"
)

// TestUpgradeCapture runs the reference night to the boundary after compare and saves the
// record and the objects it names.
func TestUpgradeCapture(t *testing.T) {
	if !*captureUpgrade {
		t.Skip("captures testdata/upgrade only with -capture-upgrade")
	}
	n := newLoggedNight(t)
	n.crash(upgradeFault)
	n.withServer(func(runs jetstream.KeyValue) {
		ctx := context.Background()
		e, err := runs.Get(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := kc.Decode(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		atBoundary(t, rec)
		obj := n.objects(ctx)
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, name := range objectNames(rec) {
			b, err := obj.GetBytes(ctx, name)
			if err != nil {
				t.Fatalf("object %s: %v", name, err)
			}
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := errors.Join(tw.Close(), zw.Close()); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(upgradeDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{upgradeRecord: e.Value(), upgradeObjects: buf.Bytes()} {
			if err := os.WriteFile(filepath.Join(upgradeDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("captured schema %d at revision %d: %d bytes of record, %d of objects", rec.Schema, e.Revision(), len(e.Value()), buf.Len())
	})
}

// A run checkpointed by the previous release, stopped after compare, resumes under this code
// on a fresh server: the night equals the ground truth, nothing before post-ledger runs
// again, and the first write stores the record in the current schema.
func TestUpgradeResumesOldRecord(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	raw, err := os.ReadFile(filepath.Join(upgradeDir, upgradeRecord))
	if err != nil {
		t.Fatal(err)
	}
	var stored storedSchema
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Schema >= kc.Schema || stored.UpdatedAt != nil {
		t.Fatalf("testdata record is schema %d (updated_at %v), want one older than %d", stored.Schema, stored.UpdatedAt, kc.Schema)
	}
	old, err := kc.Decode(raw)
	if err != nil {
		t.Fatalf("decoding the schema-%d record: %v", stored.Schema, err)
	}
	atBoundary(t, old)

	n := newLoggedNight(t)
	n.start() // cairn dev creates the assets
	n.stop()
	n.withServer(func(runs jetstream.KeyValue) {
		ctx := context.Background()
		js := n.storageJS()
		// The record carries the epoch of the storage it was written on: this storage takes it.
		stream, err := js.Stream(ctx, "KV_"+assets.BucketRuns)
		if err != nil {
			t.Fatal(err)
		}
		cfg := stream.CachedInfo().Config
		cfg.Metadata[assets.EpochKey] = old.Epoch
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		rev, err := runs.Create(ctx, runID, raw)
		if err != nil {
			t.Fatal(err)
		}
		n.loadObjects(ctx)
		// Storage of the old release had no signing keys: the new release's first start
		// registers them and seals the record above as the old release's.
		if err := js.DeleteKeyValue(ctx, assets.BucketKeys); err != nil {
			t.Fatal(err)
		}
		// The event compare's process died before publishing, as the old release would have.
		if err := stepevent.Publish(ctx, js, assets.Default, "/cairn/"+job.Compare, runID, job.PostLedger, old.Generation, rev, time.Now()); err != nil {
			t.Fatal(err)
		}
	})

	n.start()
	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done {
		t.Fatalf("the resumed run is %s (%s), want done", rec.Status, rec.NextAction)
	}
	n.assertTruth()
	n.assertReport(rec)
	c := n.audit()
	t.Logf("audit events after the upgrade: %v", c)
	if c["extractor.called"] != 0 || c["document.read"] != 0 {
		t.Errorf("extractor calls %d, document reads %d after the upgrade, want none", c["extractor.called"], c["document.read"])
	}
	for _, name := range old.Pipeline[:old.Index(job.PostLedger)] {
		if got, want := stepJSON(t, rec.Step(name)), stepJSON(t, old.Step(name)); got != want {
			t.Errorf("step %s changed after the upgrade:\n got %s\nwant %s", name, got, want)
		}
	}
	if rec.Restarts != old.Restarts {
		t.Errorf("restarts %d, want %d", rec.Restarts, old.Restarts)
	}

	kv, err := n.js.KeyValue(context.Background(), assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var now storedSchema
	if err := json.Unmarshal(e.Value(), &now); err != nil {
		t.Fatal(err)
	}
	if now.Schema != kc.Schema || now.UpdatedAt == nil {
		t.Fatalf("stored record: schema %d, updated_at %v; want schema %d with updated_at", now.Schema, now.UpdatedAt, kc.Schema)
	}
	at, err := time.Parse(time.RFC3339, *now.UpdatedAt)
	if err != nil || at.Location() != time.UTC || at.Before(time.Now().Add(-runLimit-time.Minute)) {
		t.Errorf("updated_at %q (%v): want an RFC 3339 UTC time of this test", *now.UpdatedAt, err)
	}
}

// storedSchema is the part of a stored record that says its layout.
type storedSchema struct {
	Schema    int     `json:"schema"`
	UpdatedAt *string `json:"updated_at"`
}

// atBoundary checks that rec is the run stopped right after compare's commit.
func atBoundary(t *testing.T, rec *kc.Record) {
	t.Helper()
	at := rec.Index(job.PostLedger)
	if rec.RunID != runID || rec.Status != kc.Running || rec.Lease != nil || at < 0 || rec.Current() != job.PostLedger ||
		rec.Step(job.PostLedger).Status != kc.Pending || !rec.EarlierVerified(job.PostLedger) || rec.Snapshot == nil {
		b, _ := json.Marshal(rec)
		t.Fatalf("the record is not at the boundary after compare (verified up to compare, post-ledger pending, no lease): %s", b)
	}
}

// objectNames lists the objects rec points at.
func objectNames(rec *kc.Record) []string {
	var names []string
	add := func(o *kc.Output) {
		if o != nil && o.Object != "" {
			names = append(names, o.Object)
		}
	}
	for _, name := range rec.Pipeline {
		add(rec.Step(name).Output)
		add(rec.Step(name).ParkedArtifact)
	}
	add(rec.Snapshot)
	return names
}

// storageJS connects to the night's server (one withServer runs) for the length of the test.
func (n *night) storageJS() jetstream.JetStream {
	n.t.Helper()
	nc, err := nats.Connect(n.url)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		n.t.Fatal(err)
	}
	return js
}

func (n *night) objects(ctx context.Context) jetstream.ObjectStore {
	n.t.Helper()
	obj, err := n.storageJS().ObjectStore(ctx, assets.ObjectArtifacts)
	if err != nil {
		n.t.Fatal(err)
	}
	return obj
}

// loadObjects puts testdata's objects into the artifact store under their names.
func (n *night) loadObjects(ctx context.Context) {
	t := n.t
	t.Helper()
	f, err := os.Open(filepath.Join(upgradeDir, upgradeObjects))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	obj := n.objects(ctx)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := obj.PutBytes(ctx, h.Name, b); err != nil {
			t.Fatalf("object %s: %v", h.Name, err)
		}
	}
}

func stepJSON(t *testing.T, s *kc.Step) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
