package kvcheckpoint

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
)

// lossyKV is the real bucket, except that the answers to the next few Updates are lost: the
// write lands, and the writer sees either a timeout or (as when it sends the same write again)
// the server refusing its own write with a revision mismatch.
type lossyKV struct {
	jetstream.KeyValue
	mode string // "mismatch" or "timeout"

	mu   sync.Mutex
	lose int
	// then, when set, writes after the lost write landed and before its writer re-reads.
	then func(ctx context.Context, kv jetstream.KeyValue, key string)
}

func (k *lossyKV) loseNext(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lose = n
}

func (k *lossyKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	k.mu.Lock()
	lose := k.lose > 0
	if lose {
		k.lose--
	}
	k.mu.Unlock()
	if !lose {
		return k.KeyValue.Update(ctx, key, value, last)
	}
	if _, err := k.KeyValue.Update(ctx, key, value, last); err != nil {
		return 0, err
	}
	if k.then != nil {
		k.then(ctx, k.KeyValue, key)
	}
	if k.mode == "timeout" {
		return 0, context.DeadlineExceeded
	}
	// The very same bytes on the same revision: the server itself answers with the mismatch.
	_, err := k.KeyValue.Update(ctx, key, value, last)
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errors.New("the repeated update was not refused with a revision mismatch")
	}
	return 0, err
}

func lossyStore(t *testing.T, mode string) (*Store, *lossyKV) {
	t.Helper()
	js := natstest.JetStream(t)
	ctx := ctxFor(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, History: 16, Metadata: map[string]string{EpochKey: "e1"},
	}); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	st, err := Open(ctx, js, Bucket)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	kv := &lossyKV{KeyValue: st.kv, mode: mode}
	st.kv = kv
	return st, kv
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLostReply: a write whose answer is lost has landed; the writer re-reads, finds the very
// record it wrote, and carries on as if the answer had come. Nothing is written twice.
func TestLostReply(t *testing.T) {
	for _, mode := range []string{"mismatch", "timeout"} {
		t.Run(mode, func(t *testing.T) {
			st, kv := lossyStore(t, mode)
			ctx := ctxFor(t)
			rec, rev := createRun(t, st)

			// Take.
			kv.loseNext(1)
			h, err := st.Take(ctx, rec, rev, Owner{Name: "fetch/host-1/1", Inbox: "cairn.owner.fetch.x"}, "fetch", func(r *Record) {
				r.Step("fetch").Status = InProgress
			})
			if err != nil {
				t.Fatalf("Take with a lost answer: %v", err)
			}
			if h.Token() != rev {
				t.Errorf("token %d, want %d", h.Token(), rev)
			}
			assertLatest(t, st, h, rev+1)

			// Holder.Write.
			kv.loseNext(1)
			if err := h.Write(ctx, func(r *Record) error { r.Step("fetch").Effects = &Effects{Keys: 4}; return nil }); err != nil {
				t.Fatalf("Write with a lost answer: %v", err)
			}
			got := assertLatest(t, st, h, rev+2)
			if e := got.Step("fetch").Effects; e == nil || e.Keys != 4 {
				t.Errorf("effects = %+v, want 4 keys", e)
			}

			// Holder.Release, the commit.
			kv.loseNext(1)
			if err := h.Release(ctx, func(r *Record) error { r.Step("fetch").Status = Verified; return nil }); err != nil {
				t.Fatalf("Release with a lost answer: %v", err)
			}
			got = assertLatest(t, st, h, rev+3)
			if got.Lease != nil || got.Step("fetch").Status != Verified {
				t.Errorf("after the commit: lease %+v, fetch %s; want no lease, verified", got.Lease, got.Step("fetch").Status)
			}

			// Mutate.
			kv.loseNext(1)
			m, mrev, err := st.Mutate(ctx, "run-1", func(r *Record) error { r.AddRequest("cancel-1"); return nil })
			if err != nil {
				t.Fatalf("Mutate with a lost answer: %v", err)
			}
			if mrev != rev+4 || !m.HasRequest("cancel-1") {
				t.Errorf("Mutate = revision %d, requests %v; want %d with cancel-1", mrev, m.Requests, rev+4)
			}
			if _, lrev, _ := st.Load(ctx, "run-1"); lrev != rev+4 {
				t.Errorf("revision %d, want %d: a write landed twice or not at all", lrev, rev+4)
			}
		})
	}
}

// assertLatest checks that the stored record is at want and is the holder's own.
func assertLatest(t *testing.T, st *Store, h *Holder, want uint64) *Record {
	t.Helper()
	got, grev, err := st.Load(ctxFor(t), "run-1")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if grev != want {
		t.Fatalf("revision %d, want %d: a write landed twice or not at all", grev, want)
	}
	hrec, hrev := h.Record()
	if hrev != grev {
		t.Errorf("holder is at revision %d, the record at %d", hrev, grev)
	}
	a, _ := Encode(hrec)
	b, _ := Encode(got.Clone())
	if string(a) != string(b) {
		t.Errorf("holder's record differs from the stored one:\n%s\n%s", a, b)
	}
	return got
}

// TestLostCommitReplyThenCancel: the commit lands, its answer is lost, and a cancel is written
// before the holder re-reads. The holder must see its commit landed (in the key's history),
// not take the cancel for a lost lease.
func TestLostCommitReplyThenCancel(t *testing.T) {
	st, kv := lossyStore(t, "timeout")
	ctx := ctxFor(t)
	rec, rev := createRun(t, st)
	h, err := st.Take(ctx, rec, rev, Owner{Name: "fetch/host-1/1", Inbox: "cairn.owner.fetch.x"}, "fetch", nil)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	kv.then = func(ctx context.Context, raw jetstream.KeyValue, key string) {
		e, err := raw.Get(ctx, key)
		if err != nil {
			t.Errorf("cancel: %v", err)
			return
		}
		r, err := Decode(e.Value())
		if err != nil {
			t.Errorf("cancel: %v", err)
			return
		}
		r.Status = Cancelled
		b, _ := Encode(r)
		if _, err := raw.Update(ctx, key, b, e.Revision()); err != nil {
			t.Errorf("cancel: %v", err)
		}
	}
	kv.loseNext(1)
	if err := h.Release(ctx, func(r *Record) error { r.Step("fetch").Status = Verified; return nil }); err != nil {
		t.Fatalf("Release whose answer was lost before a cancel: %v", err)
	}
	got, _, err := st.Load(ctx, "run-1")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.Status != Cancelled || got.Step("fetch").Status != Verified || got.Lease != nil {
		t.Errorf("status %s, fetch %s, lease %+v; want cancelled, verified, none", got.Status, got.Step("fetch").Status, got.Lease)
	}
}

// createRun creates run-1 (fetch, extract) and returns it as loaded.
func createRun(t *testing.T, st *Store) (*Record, uint64) {
	t.Helper()
	ctx := ctxFor(t)
	rev, err := st.Create(ctx, New("run-1", StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"fetch", "extract"}, "2026-10-13T22:00:03Z"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	rec, _, err := st.Load(ctx, "run-1")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return rec, rev
}

// TestLostReplyUnderAServiceUser: a service's user (deploy/nats/accounts.conf) may read a
// record and compare-and-set it, but may not create a consumer on the bucket, which a
// History needs. A write whose answer is lost is still found landed.
func TestLostReplyUnderAServiceUser(t *testing.T) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "svc", Password: "svc", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{
					"$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.DIRECT.GET.KV_cairn-runs.>",
					"$JS.API.STREAM.MSG.GET.KV_cairn-runs", "$KV.cairn-runs.*",
				}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func(user string) jetstream.JetStream {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := ctxFor(t)
	if _, err := connect("admin").CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, History: 16, Metadata: map[string]string{EpochKey: "e1"},
	}); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	for _, mode := range []string{"mismatch", "timeout"} {
		t.Run(mode, func(t *testing.T) {
			st, err := Open(ctx, connect("svc"), Bucket)
			if err != nil {
				t.Fatalf("Open as the service's user: %v", err)
			}
			kv := &lossyKV{KeyValue: st.kv, mode: mode}
			st.kv = kv
			rec := New("run-"+mode, StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"fetch", "extract"}, "2026-10-13T22:00:03Z")
			rev, err := st.Create(ctx, rec)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			kv.loseNext(1)
			got, grev, err := st.Mutate(ctx, rec.RunID, func(r *Record) error {
				r.Step("fetch").Status = InProgress
				return nil
			})
			if err != nil {
				t.Fatalf("Mutate with a lost answer, as the service's user: %v", err)
			}
			if grev != rev+1 || got.Steps["fetch"].Status != InProgress {
				t.Fatalf("Mutate = revision %d, fetch %s; want revision %d, in_progress (written once)", grev, got.Steps["fetch"].Status, rev+1)
			}
		})
	}
}
