package mailbox

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// Reader reads a snapshot's attachments over one connection: the folder examined once,
// its UIDVALIDITY checked once, then as many reads as the run needs. It is what a step that
// reads a month of files uses; [Snapshot.Read] opens a Reader for a single file.
//
// A Reader serves one read at a time; reads from several goroutines wait their turn. A
// read whose context ends closes the connection, and every later read fails: Close the
// Reader and open another.
type Reader struct {
	s    Snapshot
	c    Config
	f    folder
	turn chan struct{} // holds a token while a read or Close has the connection
}

// Open connects with c and examines the snapshot's folder read-only, for many reads on
// one connection; Close logs out. A folder gone or recreated (another UIDVALIDITY) is an
// error that errors.Is ErrDrift. ctx bounds the connecting only; each read has its own.
func (s Snapshot) Open(ctx context.Context, c Config) (*Reader, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	f, gone, err := s.open(ctx, c)
	if err != nil || gone != "" {
		return nil, driftOr(gone, err)
	}
	r := &Reader{s: s, c: c.withDefaults(), f: f, turn: make(chan struct{}, 1)}
	return r, nil
}

// Read fetches the attachment name of message uid again and returns its bytes when they
// are still those the snapshot froze. A folder gone or recreated, the message removed, or
// the attachment gone or changed is an error that errors.Is ErrDrift, naming what changed;
// a message or attachment the snapshot does not hold is ErrNotFrozen. Of two attachments
// of one message with the same name, Read reads the first.
func (s Snapshot) Read(ctx context.Context, c Config, uid uint32, name string) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if _, _, err := s.attachment(uid, name); err != nil {
		return nil, err // before dialling
	}
	r, err := s.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	return r.Read(ctx, uid, name)
}

// Read is [Snapshot.Read] on the Reader's connection: the same checks, the same errors.
// A message removed since Open is ErrDrift naming it.
func (r *Reader) Read(ctx context.Context, uid uint32, name string) ([]byte, error) {
	m, i, err := r.s.attachment(uid, name)
	if err != nil {
		return nil, err
	}
	select {
	case r.turn <- struct{}{}:
		defer func() { <-r.turn }()
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if r.f == nil {
		return nil, fmt.Errorf("reading %q of message %d in folder %q: the reader is closed: %w", name, uid, r.s.Folder, net.ErrClosed)
	}
	var (
		data  []byte
		found bool
	)
	err = r.f.bodies(ctx, []uint32{uid}, func(_ uint32, raw []byte) error {
		found = true
		parts, err := attachments(raw)
		if err != nil {
			return fmt.Errorf("message %d: %w", uid, err)
		}
		if changes := r.s.compare(m, parts); len(changes) > 0 {
			return fmt.Errorf("%w: %s", ErrDrift, strings.Join(changes, "; "))
		}
		data = parts[i].data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %q of message %d in folder %q: %w", name, uid, r.s.Folder, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %s", ErrDrift, r.s.removed(uid))
	}
	return data, nil
}

// Close logs out and ends the connection; the logout is bounded by the config's
// DialTimeout. Closing a closed Reader does nothing.
func (r *Reader) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.DialTimeout)
	defer cancel()
	return r.close(ctx)
}

func (r *Reader) close(ctx context.Context) error {
	r.turn <- struct{}{} // after the read under way, which its own context bounds
	defer func() { <-r.turn }()
	if r.f == nil {
		return nil
	}
	f := r.f
	r.f = nil
	return f.close(ctx)
}

// attachment is the frozen message uid and the index of its attachment name, or
// ErrNotFrozen.
func (s Snapshot) attachment(uid uint32, name string) (Message, int, error) {
	m, ok := s.message(uid)
	if !ok {
		return Message{}, 0, fmt.Errorf("message %d of folder %q: %w", uid, s.Folder, ErrNotFrozen)
	}
	i := attachmentIndex(m.Attachments, name)
	if i < 0 {
		return Message{}, 0, fmt.Errorf("attachment %q of message %d in folder %q: %w", name, uid, s.Folder, ErrNotFrozen)
	}
	return m, i, nil
}
