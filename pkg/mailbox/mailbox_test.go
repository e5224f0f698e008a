package mailbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/mailbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const folder = "Invoices/2026-05"

var (
	may     = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	cutoff  = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC) // the month ends
	invoice = []file{
		pdf("A-1001"),
		pdf("A-1002"),
		{name: "lines.csv", contentType: "text/csv", data: []byte("sku;qty;price\r\nM\xdc-7;3;9,90\r\n")}, // Latin-1, kept as sent
		{name: "Rechnung Müller.pdf", contentType: "application/pdf", data: []byte("%PDF-1.4 Müller GmbH")},
		pdf("A-1003"),
	}
)

// month is what setup put in the folder: the run's messages by UID and what each carries.
type month struct {
	files map[uint32][]file // the run's messages
	june  uint32            // a message received after the cut-off, before the freeze
}

type bundle struct {
	ctx  context.Context
	cfg  mailbox.Config
	srv  *server
	post *postmaster
	month
}

// setup starts a server with the folder of a month: five messages before the cut-off
// (two attachments in one, a text-only notice, a name with an umlaut) and one after it.
func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	srv, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	b := &bundle{ctx: t.Context(), cfg: srv.config(), srv: srv, post: dialPostmaster(t, srv.Addr)}
	b.post.create(folder)
	b.files = map[uint32][]file{}
	put := func(day int, subject string, files ...file) {
		uid := b.post.deliver(folder, letter(subject, files...), may.AddDate(0, 0, day-1).Add(9*time.Hour))
		b.files[uid] = files
	}
	put(4, "Invoice A-1001", invoice[0])
	put(5, "Invoice A-1002 and its lines", invoice[1], invoice[2])
	put(6, "Price change notice")
	put(7, "Rechnung", invoice[3])
	put(31, "Invoice A-1003", invoice[4])
	b.june = b.post.deliver(folder, letter("Invoice B-2001", pdf("B-2001")), cutoff.Add(2*time.Hour))
	return b
}

func (b *bundle) freeze(t *testing.T) mailbox.Snapshot {
	t.Helper()
	s, err := mailbox.Freeze(b.ctx, b.cfg, folder, cutoff)
	if err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	return s
}

func TestFreezeHoldsTheMonthByDigest(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)

	if s.Folder != folder || s.UIDValidity == 0 || s.HighestUID != b.june || !s.Cutoff.Equal(cutoff) {
		t.Errorf("snapshot of folder %q validity %d highest %d cutoff %s; want %q, a validity, %d, %s",
			s.Folder, s.UIDValidity, s.HighestUID, s.Cutoff, folder, b.june, cutoff)
	}
	uids := slices.Sorted(maps.Keys(b.files))
	var got []uint32
	for _, m := range s.Messages {
		got = append(got, m.UID)
	}
	if !slices.Equal(got, uids) {
		t.Fatalf("UIDs %v, want %v (the June mail %d left out)", got, uids, b.june)
	}
	for _, m := range s.Messages {
		want := make([]mailbox.Attachment, len(b.files[m.UID]))
		for i, f := range b.files[m.UID] {
			want[i] = mailbox.Attachment{Name: f.name, Size: int64(len(f.data)), Digest: idempotency.Digest(f.data)}
		}
		if !slices.Equal(m.Attachments, want) {
			t.Errorf("message %d: attachments %+v, want %+v", m.UID, m.Attachments, want)
		}
		if !m.Date.Before(cutoff) || m.Date.Before(may) {
			t.Errorf("message %d: date %s, not in May", m.UID, m.Date)
		}
	}

	// A step's output: JSON there and back is the same snapshot, the same fingerprint.
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back mailbox.Snapshot
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) || back.Fingerprint() != s.Fingerprint() {
		t.Errorf("JSON round trip changed the snapshot:\n%s\n%+v", raw, back)
	}
	if !strings.HasPrefix(s.Fingerprint(), "sha256:") || s.Fingerprint() != b.freeze(t).Fingerprint() {
		t.Errorf("fingerprint %s differs between two freezes of an unchanged folder", s.Fingerprint())
	}
}

func TestWithoutCutoffEveryMessageAtTheFreeze(t *testing.T) {
	b := setup(t)
	s, err := mailbox.Freeze(b.ctx, b.cfg, folder, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Messages); n != len(b.files)+1 || s.Messages[n-1].UID != b.june {
		t.Errorf("%d messages, want %d with the June one", n, len(b.files)+1)
	}
}

func TestReadReturnsTheFrozenBytes(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	for uid, files := range b.files {
		for _, f := range files {
			got, err := s.Read(b.ctx, b.cfg, uid, f.name)
			if err != nil {
				t.Fatalf("Read(%d, %q): %v", uid, f.name, err)
			}
			if !bytes.Equal(got, f.data) {
				t.Errorf("Read(%d, %q) = %q, want %q", uid, f.name, got, f.data)
			}
		}
	}
	if _, err := s.Read(b.ctx, b.cfg, b.june, "invoice-B-2001.pdf"); !errors.Is(err, mailbox.ErrNotFrozen) {
		t.Errorf("reading the June mail: %v, want ErrNotFrozen", err)
	}
	if _, err := s.Read(b.ctx, b.cfg, s.Messages[0].UID, "other.pdf"); !errors.Is(err, mailbox.ErrNotFrozen) {
		t.Errorf("reading an attachment never there: %v, want ErrNotFrozen", err)
	}
}

func TestMailAfterTheFreezeIsNotDrift(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)

	// Late mail, even dated in May, and a person reading one of the run's messages.
	late := b.post.deliver(folder, letter("Invoice A-1004", pdf("A-1004")), cutoff.Add(-time.Hour))
	b.post.read(folder, s.Messages[0].UID)

	changed, err := s.Check(b.ctx, b.cfg)
	if err != nil || len(changed) != 0 {
		t.Errorf("Check after late mail %d and a \\Seen: %q, %v; want no change", late, changed, err)
	}
	if _, err := s.Read(b.ctx, b.cfg, s.Messages[0].UID, invoice[0].name); err != nil {
		t.Errorf("Read after late mail: %v", err)
	}
}

func TestARemovedMessageIsDrift(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	gone := s.Messages[1] // two attachments
	b.post.expunge(folder, gone.UID)
	b.post.expunge(folder, b.june) // left out by the cut-off: not the run's

	changed, err := s.Check(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`folder "Invoices/2026-05": message 2 was removed`}
	if !slices.Equal(changed, want) {
		t.Errorf("Check: %q, want %q", changed, want)
	}
	_, err = s.Read(b.ctx, b.cfg, gone.UID, gone.Attachments[0].Name)
	if !errors.Is(err, mailbox.ErrDrift) || !strings.Contains(err.Error(), want[0]) {
		t.Errorf("Read of the removed message: %v, want ErrDrift naming %q", err, want[0])
	}
	if _, err := s.Read(b.ctx, b.cfg, s.Messages[0].UID, s.Messages[0].Attachments[0].Name); err != nil {
		t.Errorf("Read of a message still there: %v", err)
	}
}

func TestARecreatedFolderIsDrift(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	// The same mail again in a folder of the same name: the UIDs name other messages now.
	b.post.delete(folder)
	b.post.create(folder)
	for _, uid := range slices.Sorted(maps.Keys(b.files)) {
		b.post.deliver(folder, letter("again", b.files[uid]...), may)
	}

	changed, err := s.Check(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || !strings.Contains(changed[0], `folder "Invoices/2026-05": UIDVALIDITY `) ||
		!strings.Contains(changed[0], " is now ") {
		t.Errorf("Check: %q, want one change naming the folder and both validities", changed)
	}
	now, err := mailbox.Freeze(b.ctx, b.cfg, folder, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	want := `UIDVALIDITY ` + itoa(s.UIDValidity) + ` is now ` + itoa(now.UIDValidity)
	if !strings.Contains(changed[0], want) {
		t.Errorf("Check: %q, want it to say %q", changed[0], want)
	}
	_, err = s.Read(b.ctx, b.cfg, s.Messages[0].UID, invoice[0].name)
	if !errors.Is(err, mailbox.ErrDrift) || !strings.Contains(err.Error(), want) {
		t.Errorf("Read: %v, want ErrDrift saying %q", err, want)
	}
	if r, err := s.Open(b.ctx, b.cfg); !errors.Is(err, mailbox.ErrDrift) || !strings.Contains(err.Error(), want) {
		t.Errorf("Open: %v, %v; want ErrDrift saying %q", r, err, want)
	}
	if now.Fingerprint() == s.Fingerprint() {
		t.Error("the recreated folder has the old fingerprint")
	}
}

func TestADeletedFolderIsDrift(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	b.post.delete(folder)

	changed, err := s.Check(b.ctx, b.cfg)
	want := `folder "Invoices/2026-05" no longer exists`
	if err != nil || len(changed) != 1 || !strings.HasPrefix(changed[0], want) {
		t.Errorf("Check: %q, %v; want %q", changed, err, want)
	}
	if _, err := s.Read(b.ctx, b.cfg, s.Messages[0].UID, invoice[0].name); !errors.Is(err, mailbox.ErrDrift) {
		t.Errorf("Read: %v, want ErrDrift", err)
	}
	if r, err := s.Open(b.ctx, b.cfg); !errors.Is(err, mailbox.ErrDrift) || !strings.Contains(err.Error(), want) {
		t.Errorf("Open: %v, %v; want ErrDrift saying %q", r, err, want)
	}
}

func TestADuplicateInvoiceIsOneDigest(t *testing.T) {
	b := setup(t)
	// The supplier sends A-1001 again, under another subject and name.
	again := invoice[0]
	again.name = "A-1001 (reminder).pdf"
	dup := b.post.deliver(folder, letter("Reminder: invoice A-1001", again), may.AddDate(0, 0, 20))
	s := b.freeze(t)

	u := s.Unique()
	first := slices.Min(slices.Collect(maps.Keys(b.files)))
	want := mailbox.Distinct{Digest: idempotency.Digest(invoice[0].data), Size: int64(len(invoice[0].data)), Name: invoice[0].name, UIDs: []uint32{first, dup}}
	if !reflect.DeepEqual(u[0], want) {
		t.Errorf("Unique()[0] = %+v, want %+v", u[0], want)
	}
	if len(u) != len(invoice) {
		t.Errorf("%d distinct attachments, want %d", len(u), len(invoice))
	}
	for _, d := range u[1:] {
		if len(d.UIDs) != 1 {
			t.Errorf("%s carried by %v, want one message", d.Name, d.UIDs)
		}
	}
}

func TestTheMailboxIsOnlyRead(t *testing.T) {
	b := setup(t)
	before := b.post.state(folder)

	s := b.freeze(t)
	r, err := s.Open(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Messages {
		for _, a := range m.Attachments {
			if _, err := s.Read(b.ctx, b.cfg, m.UID, a.Name); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Read(b.ctx, m.UID, a.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.Check(b.ctx, b.cfg); err != nil || len(changed) != 0 {
		t.Fatalf("Check of an unchanged folder: %q, %v", changed, err)
	}

	after := b.post.state(folder)
	if !maps.Equal(before, after) {
		t.Errorf("the mailbox changed:\nbefore %v\nafter  %v", before, after)
	}
	for uid, st := range after {
		if strings.Contains(st, `\Seen`) {
			t.Errorf("message %d: %s", uid, st)
		}
	}
}

func TestSettingsAreCheckedBeforeDialling(t *testing.T) {
	t.Parallel()
	ok := mailbox.Config{Addr: "127.0.0.1:1", User: "u", Password: "p"}
	for _, tc := range []struct {
		name   string
		edit   func(*mailbox.Config)
		folder string
		says   string
	}{
		{"address", func(c *mailbox.Config) { c.Addr = "" }, folder, "address (Addr"},
		{"user", func(c *mailbox.Config) { c.User = "" }, folder, "user (User)"},
		{"folder", func(*mailbox.Config) {}, "", "folder"},
		{"timeout", func(c *mailbox.Config) { c.DialTimeout = -time.Second }, folder, "DialTimeout"},
	} {
		c := ok
		tc.edit(&c)
		_, err := mailbox.Freeze(t.Context(), c, tc.folder, cutoff)
		if !errors.Is(err, mailbox.ErrConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrConfig naming %q", tc.name, err, tc.says)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("a complete config: %v", err)
	}
}

func TestACanceledContextEndsTheCall(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancelCause(b.ctx)
	stop := errors.New("shutting down")
	cancel(stop)
	if _, err := mailbox.Freeze(ctx, b.cfg, folder, cutoff); !errors.Is(err, stop) && !errors.Is(err, context.Canceled) {
		t.Errorf("Freeze with an ended context: %v", err)
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
