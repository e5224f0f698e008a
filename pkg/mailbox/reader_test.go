package mailbox_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/cairnhq/cairn/pkg/mailbox"
)

// every is each (UID, attachment) of the snapshot, in order.
func every(s mailbox.Snapshot) (uids []uint32, names []string) {
	for _, m := range s.Messages {
		for _, a := range m.Attachments {
			uids, names = append(uids, m.UID), append(names, a.Name)
		}
	}
	return uids, names
}

func TestAReaderReadsOverOneConnection(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	uids, names := every(s)
	const rounds = 4 // each file more than once: reads do not use the connection up

	before := b.srv.accepted.Load()
	r, err := s.Open(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]byte, len(uids))
	for range rounds {
		for i := range uids {
			data, err := r.Read(b.ctx, uids[i], names[i])
			if err != nil {
				t.Fatalf("Reader.Read(%d, %q): %v", uids[i], names[i], err)
			}
			if got[i] != nil && !bytes.Equal(data, got[i]) {
				t.Errorf("Reader.Read(%d, %q) changed between rounds", uids[i], names[i])
			}
			got[i] = data
		}
	}
	// What the snapshot does not hold is refused before the connection is asked.
	if _, err := r.Read(b.ctx, b.june, "invoice-B-2001.pdf"); !errors.Is(err, mailbox.ErrNotFrozen) {
		t.Errorf("Reader.Read of the June mail: %v, want ErrNotFrozen", err)
	}
	if _, err := r.Read(b.ctx, uids[0], "other.pdf"); !errors.Is(err, mailbox.ErrNotFrozen) {
		t.Errorf("Reader.Read of an attachment never there: %v, want ErrNotFrozen", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := b.srv.accepted.Load() - before; n != 1 {
		t.Errorf("%d reads took %d connections, want 1", rounds*len(uids), n)
	}

	// The same bytes as Snapshot.Read and as sent; it takes a connection for each.
	before = b.srv.accepted.Load()
	for i := range uids {
		one, err := s.Read(b.ctx, b.cfg, uids[i], names[i])
		if err != nil {
			t.Fatal(err)
		}
		want := b.files[uids[i]][attachmentAt(s, uids[i], names[i])].data
		if !bytes.Equal(got[i], one) || !bytes.Equal(one, want) {
			t.Errorf("(%d, %q): Reader %q, Snapshot.Read %q, sent %q", uids[i], names[i], got[i], one, want)
		}
	}
	if n := b.srv.accepted.Load() - before; n != int64(len(uids)) {
		t.Errorf("%d Snapshot.Reads took %d connections, want one each", len(uids), n)
	}

	// Closed is closed: a read fails, a second Close does nothing.
	if _, err := r.Read(b.ctx, uids[0], names[0]); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v, want net.ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func attachmentAt(s mailbox.Snapshot, uid uint32, name string) int {
	for _, m := range s.Messages {
		for i, a := range m.Attachments {
			if m.UID == uid && a.Name == name {
				return i
			}
		}
	}
	return -1
}

func TestARemovedMessageIsDriftUnderAnOpenReader(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	r, err := s.Open(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	kept, gone := s.Messages[0], s.Messages[1]
	if _, err := r.Read(b.ctx, gone.UID, gone.Attachments[0].Name); err != nil {
		t.Fatalf("Read before the expunge: %v", err)
	}

	before := b.srv.accepted.Load()
	b.post.expunge(folder, gone.UID) // a second client, while the reader has the folder open
	_, err = r.Read(b.ctx, gone.UID, gone.Attachments[1].Name)
	want := `folder "Invoices/2026-05": message 2 was removed`
	if !errors.Is(err, mailbox.ErrDrift) || !strings.Contains(err.Error(), want) {
		t.Errorf("Read of the removed message: %v, want ErrDrift naming %q", err, want)
	}
	if _, err := r.Read(b.ctx, kept.UID, kept.Attachments[0].Name); err != nil {
		t.Errorf("Read of a message still there, after the drift: %v", err)
	}
	if n := b.srv.accepted.Load() - before; n != 0 {
		t.Errorf("the reader connected %d more times, want none", n)
	}
}

func TestAReaderServesOneReadAtATime(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	uids, names := every(s)
	r, err := s.Open(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	for i := range uids {
		wg.Go(func() {
			data, err := r.Read(b.ctx, uids[i], names[i])
			if want := b.files[uids[i]][attachmentAt(s, uids[i], names[i])].data; err != nil || !bytes.Equal(data, want) {
				t.Errorf("Read(%d, %q) from goroutine %d: %q, %v", uids[i], names[i], i, data, err)
			}
		})
	}
	wg.Wait()
}

func TestAReadWhoseContextEndsEndsTheReader(t *testing.T) {
	b := setup(t)
	s := b.freeze(t)
	r, err := s.Open(b.ctx, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancelCause(b.ctx)
	stop := errors.New("shutting down")
	cancel(stop)
	m := s.Messages[0]
	if _, err := r.Read(ctx, m.UID, m.Attachments[0].Name); !errors.Is(err, stop) {
		t.Errorf("Read with an ended context: %v, want its cause", err)
	}
}
