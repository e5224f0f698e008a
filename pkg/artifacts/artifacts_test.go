package artifacts_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

const bucket = "cairn-artifacts"

type fixture struct {
	store *artifacts.Store
	obj   jetstream.ObjectStore
}

func setup(t *testing.T) fixture {
	t.Helper()
	js := natstest.JetStream(t)
	obj, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: bucket})
	if err != nil {
		t.Fatalf("creating object store: %v", err)
	}
	s, err := artifacts.Open(t.Context(), js, bucket)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return fixture{store: s, obj: obj}
}

// objects lists the object store's names; none when it is empty.
func (f fixture) objects(t *testing.T) []string {
	t.Helper()
	infos, err := f.obj.List(t.Context())
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("listing objects: %v", err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	return names
}

func wantDigest(b []byte) string {
	h := sha256.Sum256(b)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(h[:])
}

func objectName(run, step string, b []byte) string {
	h := sha256.Sum256(b)
	return run + "/" + step + "/" + hex.EncodeToString(h[:])
}

// bigJSON is compact JSON of exactly n bytes: a string literal.
func bigJSON(n int) []byte {
	return []byte(`"` + strings.Repeat("a", n-2) + `"`)
}

func TestOpenMissingBucket(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	if _, err := artifacts.Open(t.Context(), js, "nope"); err == nil {
		t.Fatal("Open of a missing bucket = nil error")
	}
}

func TestDigest(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{nil, []byte("x"), bigJSON(5000)} {
		if got, want := artifacts.Digest(b), wantDigest(b); got != want {
			t.Errorf("Digest = %s, want %s", got, want)
		}
	}
}

func TestSaveInline(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, data := range [][]byte{
		[]byte(`{"invoices":12,"total_paise":1234500}`),
		[]byte(`[1,2,3]`),
		[]byte(`null`),
		bigJSON(artifacts.InlineMax), // the largest inline output
	} {
		out, err := f.store.Save(t.Context(), "run-1", "extract", data)
		if err != nil {
			t.Fatalf("Save(%.40s): %v", data, err)
		}
		if out.Object != "" {
			t.Errorf("Save(%.40s): object %q, want inline", data, out.Object)
		}
		if !bytes.Equal(out.Inline, data) {
			t.Errorf("Save(%.40s): inline %s", data, out.Inline)
		}
		if out.Digest != wantDigest(data) {
			t.Errorf("Save(%.40s): digest %s, want %s", data, out.Digest, wantDigest(data))
		}
		if out.Size != int64(len(data)) {
			t.Errorf("Save(%.40s): size %d, want %d", data, out.Size, len(data))
		}
		got, err := f.store.Load(t.Context(), out)
		if err != nil {
			t.Fatalf("Load inline: %v", err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("Load inline = %.40s, want %.40s", got, data)
		}
	}
	if names := f.objects(t); len(names) != 0 {
		t.Fatalf("inline saves wrote objects %v", names)
	}
}

func TestInlineSurvivesTheRecord(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, data := range [][]byte{[]byte(`{"a":[1,2],"b":"x"}`), []byte(`null`), []byte(`"é\u00e9"`), []byte(`""`)} {
		out, err := f.store.Save(t.Context(), "run-1", "fetch", data)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var back kvcheckpoint.Output
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatal(err)
		}
		if got, err := f.store.Load(t.Context(), &back); err != nil || !bytes.Equal(got, data) {
			t.Errorf("Load of %s after a JSON round trip (%s) = %s, %v", data, enc, got, err)
		}
	}
}

func TestSaveEmpty(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out, err := f.store.Save(t.Context(), "run-1", "fetch", nil)
	if err != nil {
		t.Fatalf("Save(empty): %v", err)
	}
	got, err := f.store.Load(t.Context(), out)
	if err != nil || len(got) != 0 {
		t.Fatalf("Load(empty) = %q, %v", got, err)
	}
}

func TestSaveObject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data []byte
	}{
		{"over 1 KiB", bigJSON(artifacts.InlineMax + 1)},
		{"large", bigJSON(200_000)},
		{"not compact", []byte(`{"a": 1}`)},
		{"escaped by the encoder", []byte(`"<b>"`)},
		{"not JSON", []byte("plain text")},
		{"binary", []byte{0, 1, 2, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := t.Context()
			out, err := f.store.Save(ctx, "run-2026-10-13-ldh", "post-ledger", tt.data)
			if err != nil {
				t.Fatalf("Save: %v", err)
			}
			name := objectName("run-2026-10-13-ldh", "post-ledger", tt.data)
			if out.Object != name {
				t.Errorf("object %q, want %q", out.Object, name)
			}
			if out.Inline != nil {
				t.Errorf("an object output is also inline: %.40s", out.Inline)
			}
			if out.Digest != wantDigest(tt.data) || out.Size != int64(len(tt.data)) {
				t.Errorf("digest %s size %d, want %s %d", out.Digest, out.Size, wantDigest(tt.data), len(tt.data))
			}
			info, err := f.obj.GetInfo(ctx, name)
			if err != nil {
				t.Fatalf("object info: %v", err)
			}
			if info.Digest != out.Digest {
				t.Errorf("the store's digest %s, the pointer's %s", info.Digest, out.Digest)
			}
			got, err := f.store.Load(ctx, out)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !bytes.Equal(got, tt.data) {
				t.Errorf("Load = %d bytes, want %d", len(got), len(tt.data))
			}
		})
	}
}

func TestSaveTwiceWritesOneObject(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	data := bigJSON(4096)
	first, err := f.store.Save(ctx, "run-1", "extract", data)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.obj.GetInfo(ctx, first.Object)
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.store.Save(ctx, "run-1", "extract", bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	if second.Object != first.Object || second.Digest != first.Digest {
		t.Fatalf("second pointer %+v, first %+v", second, first)
	}
	if names := f.objects(t); len(names) != 1 || names[0] != first.Object {
		t.Fatalf("objects %v, want [%s]", names, first.Object)
	}
	again, err := f.obj.GetInfo(ctx, first.Object)
	if err != nil {
		t.Fatal(err)
	}
	if again.NUID != info.NUID {
		t.Fatalf("the object was rewritten (NUID %s, was %s)", again.NUID, info.NUID)
	}
	// Another step's output with the same content is its own object.
	other, err := f.store.Save(ctx, "run-1", "post-ledger", data)
	if err != nil {
		t.Fatal(err)
	}
	if other.Object == first.Object || len(f.objects(t)) != 2 {
		t.Fatalf("another step shares the object %s", other.Object)
	}
}

func TestLoadWrongDigest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	for _, data := range [][]byte{[]byte(`{"n":1}`), bigJSON(3000)} {
		out, err := f.store.Save(ctx, "run-1", "fetch", data)
		if err != nil {
			t.Fatal(err)
		}
		bad := *out
		bad.Digest = wantDigest([]byte("something else"))
		if _, err := f.store.Load(ctx, &bad); !errors.Is(err, artifacts.ErrDigest) {
			t.Errorf("Load with a wrong digest (object %q) = %v, want ErrDigest", out.Object, err)
		}
	}
	// A tampered inline value.
	out, err := f.store.Save(ctx, "run-1", "fetch", []byte(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	out.Inline = []byte(`{"n":2}`)
	if _, err := f.store.Load(ctx, out); !errors.Is(err, artifacts.ErrDigest) {
		t.Errorf("Load of a changed inline value = %v, want ErrDigest", err)
	}
}

func TestLoadOverwrittenObject(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	out, err := f.store.Save(ctx, "run-1", "extract", bigJSON(2048))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.obj.PutBytes(ctx, out.Object, bigJSON(2049)); err != nil {
		t.Fatalf("overwriting the object: %v", err)
	}
	if _, err := f.store.Load(ctx, out); !errors.Is(err, artifacts.ErrDigest) {
		t.Fatalf("Load of an overwritten object = %v, want ErrDigest", err)
	}
}

func TestLoadMissing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	if _, err := f.store.Load(ctx, nil); err == nil {
		t.Error("Load(nil) = nil error")
	}
	data := bigJSON(2000)
	out := &kvcheckpoint.Output{Object: objectName("run-1", "extract", data), Digest: wantDigest(data), Size: 2000}
	if _, err := f.store.Load(ctx, out); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("Load of a missing object = %v, want ErrObjectNotFound", err)
	}
}

// TestReadStreams: a reader that takes only part of an output still has the digest checked
// over every byte, and one that fails on bytes other than the record's gets ErrDigest.
func TestReadStreams(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	data := bigJSON(300_000)
	out, err := f.store.Save(ctx, "run-1", "match", data)
	if err != nil {
		t.Fatal(err)
	}
	var head [16]byte
	if err := f.store.Read(ctx, out, func(r io.Reader) error {
		_, err := io.ReadFull(r, head[:])
		return err
	}); err != nil || !bytes.Equal(head[:], data[:16]) {
		t.Fatalf("Read of the first 16 bytes = %q, %v", head, err)
	}
	bad := *out
	bad.Digest = wantDigest([]byte("something else"))
	failed := errors.New("not what was expected")
	for name, read := range map[string]func(io.Reader) error{
		"partial": func(r io.Reader) error { _, err := io.ReadFull(r, head[:]); return err },
		"failing": func(io.Reader) error { return failed },
	} {
		if err := f.store.Read(ctx, &bad, read); !errors.Is(err, artifacts.ErrDigest) {
			t.Errorf("%s Read with a wrong digest = %v, want ErrDigest", name, err)
		}
	}
	if err := f.store.Read(ctx, out, func(io.Reader) error { return failed }); !errors.Is(err, failed) {
		t.Errorf("Read whose reader failed = %v, want its error", err)
	}
}

// A content-addressed name holding other bytes is never overwritten: the save is refused,
// naming the name and both digests, and the object stays as it is.
func TestSaveRefusesAnotherObjectUnderItsName(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	data, other := bigJSON(2048), bigJSON(2049)
	name := objectName("run-1", "extract", data)
	if _, err := f.obj.PutBytes(ctx, name, other); err != nil {
		t.Fatal(err)
	}
	_, err := f.store.Save(ctx, "run-1", "extract", data)
	if !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("Save over another object = %v, want idempotency.ErrConflict", err)
	}
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != name || c.Stored != idempotency.Digest(other) || c.New != idempotency.Digest(data) {
		t.Fatalf("conflict %+v, want %s with the digests of both contents", c, name)
	}
	info, err := f.obj.GetInfo(ctx, name)
	if err != nil || info.Digest != wantDigest(other) {
		t.Fatalf("object %s is %v (%v), want it left as it was", name, info, err)
	}
}

// A read the store breaks off (a leader change, a timeout) is a part of the object, not other
// bytes: the error says why it stopped, never ErrDigest, which hands the run to a person.
func TestReadBrokenOffIsNotADigestMismatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	data := bigJSON(1_000_000) // several chunks
	out, err := f.store.Save(t.Context(), "run-1", "match", data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err = f.store.Read(ctx, out, func(r io.Reader) error {
		var head [16]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		cancel() // the store goes away after the first bytes
		_, err := io.Copy(io.Discard, r)
		return err
	})
	if err == nil || errors.Is(err, artifacts.ErrDigest) {
		t.Fatalf("Read broken off = %v, want the store's error, not ErrDigest", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Read broken off = %v, want context.Canceled", err)
	}
}

// A small object is stored as the object store's Put stores it: the same meta, read back by
// the client's Get.
func TestSmallObjectAsPutStoresIt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	data := bigJSON(artifacts.InlineMax + 100)
	out, err := f.store.SaveObject(ctx, "r1", "s1", data)
	if err != nil {
		t.Fatal(err)
	}
	put, err := f.obj.Put(ctx, jetstream.ObjectMeta{Name: "by-put", Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(len(data))}}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.obj.GetInfo(ctx, out.Object)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bucket != put.Bucket || got.Size != put.Size || got.Chunks != put.Chunks || got.Digest != put.Digest || got.Deleted ||
		got.Opts == nil || got.Opts.ChunkSize != put.Opts.ChunkSize || got.NUID == "" || got.NUID == put.NUID {
		t.Errorf("meta %+v (opts %+v), Put's %+v (opts %+v)", got, got.Opts, put, put.Opts)
	}
	b, err := f.obj.GetBytes(ctx, out.Object)
	if err != nil || !bytes.Equal(b, data) {
		t.Errorf("Get: %d bytes (%v), want %d", len(b), err, len(data))
	}
}

// A read goes on when the bucket's stream loses its leader, and with no leader at all: the
// replicas still answer for what they hold. The client's Get, whose ordered consumer needs a
// leader, waited out the read's deadline (2 minutes without one) in half the tries after a
// leader stopped, and always with no leader.
func TestReadAcrossALeaderStop(t *testing.T) {
	t.Parallel()
	srvs, js := natstest.Cluster(t)
	ctx := t.Context()
	var s *artifacts.Store
	var out *kvcheckpoint.Output
	data := bigJSON(300_000) // three chunks
	eventually.That(t, 30*time.Second, "an object saved on the new cluster", func() (err error) {
		if _, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, Replicas: 3}); err != nil {
			return err
		}
		if s, err = artifacts.Open(ctx, js, bucket); err != nil {
			return err
		}
		out, err = s.Save(ctx, "run-1", "match", data)
		return err
	})
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	// Every replica holds the object before any stops.
	eventually.That(t, 30*time.Second, "every replica current", func() error {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag > 0 {
				return fmt.Errorf("replica %s lags by %d", r.Name, r.Lag)
			}
		}
		return nil
	})
	stopped := map[string]bool{}
	for _, what := range []string{"the leader stopped", "two of three stopped (no leader)"} {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name := info.Cluster.Leader
		if stopped[name] || name == "" {
			for _, srv := range srvs {
				if !stopped[srv.Name()] && (name == "" || srv.Name() != name) {
					name = srv.Name()
					break
				}
			}
		}
		for _, srv := range srvs {
			if srv.Name() == name {
				srv.Shutdown()
				stopped[name] = true
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := s.Load(rctx, out)
		cancel()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s (%s): Load = %d bytes, %v; want the %d bytes saved", what, name, len(got), err, len(data))
		}
	}
}
