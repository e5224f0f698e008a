package mailbox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
)

// folder is what the package asks of an IMAP server, once the folder is examined. It is
// the only place go-imap (a beta, pinned) is named, so that a new release touches this file
// alone; and it has no verb that writes (no STORE, EXPUNGE, APPEND, COPY, MOVE), so the
// package cannot change a mailbox by mistake.
type folder interface {
	// status is the folder's UIDVALIDITY and UIDNEXT as EXAMINE reported them.
	status() folderStatus
	// list is every message's UID and INTERNALDATE, in no particular order.
	list(ctx context.Context) ([]entry, error)
	// bodies calls fn with the whole message (BODY.PEEK[], which leaves \Seen alone) of each
	// UID in uids that is still in the folder; a UID no longer there is skipped.
	bodies(ctx context.Context, uids []uint32, fn func(uid uint32, raw []byte) error) error
	// close logs out, ctx bounding the logout, and ends the connection.
	close(ctx context.Context) error
}

type folderStatus struct {
	validity uint32
	uidNext  uint32 // 0 when the server did not say
	messages uint32
}

type entry struct {
	uid  uint32
	date time.Time
}

// errNoFolder means the folder does not exist (any more).
var errNoFolder = errors.New("no such folder")

// examine connects to c's server, logs in and selects name read-only (EXAMINE).
func examine(ctx context.Context, c Config, name string) (folder, error) {
	c = c.withDefaults()
	d := net.Dialer{Timeout: c.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("dialling %s: %w", c.Addr, err)
	}
	if c.TLS != nil {
		tc := tls.Client(conn, c.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS with %s: %w", c.Addr, err)
		}
		conn = tc
	}
	f := &imapFolder{cl: imapclient.New(conn, nil)}
	// ctx bounds the connecting only: each later call is bounded by its own, so that one
	// connection serves many reads (Reader).
	defer f.bind(ctx)()
	fail := func(err error) (folder, error) {
		f.close(ctx)
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	cl := f.cl
	if err := cl.WaitGreeting(); err != nil {
		return fail(fmt.Errorf("greeting of %s: %w", c.Addr, err))
	}
	if err := cl.Login(c.User, c.Password).Wait(); err != nil {
		return fail(fmt.Errorf("logging in to %s as %q: %w", c.Addr, c.User, err))
	}
	sel, err := cl.Select(name, &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil {
		if ie, ok := errors.AsType[*imap.Error](err); ok && ie.Code == imap.ResponseCodeNonExistent {
			err = errNoFolder
		}
		return fail(fmt.Errorf("examining folder %q: %w", name, err))
	}
	f.st = folderStatus{validity: sel.UIDValidity, uidNext: uint32(sel.UIDNext), messages: sel.NumMessages}
	return f, nil
}

type imapFolder struct {
	cl *imapclient.Client
	st folderStatus
}

// bind makes the end of ctx end the command under way, and returns the release. The
// client's commands take no context: closing the connection ends a wait, and the folder
// with it.
func (f *imapFolder) bind(ctx context.Context) (release func()) {
	stop := context.AfterFunc(ctx, func() { f.cl.Close() })
	return func() { stop() }
}

func (f *imapFolder) status() folderStatus { return f.st }

func (f *imapFolder) list(ctx context.Context) ([]entry, error) {
	if f.st.messages == 0 {
		return nil, nil // "1:*" names a message even in an empty folder
	}
	defer f.bind(ctx)()
	all := imap.UIDSet{imap.UIDRange{Start: 1, Stop: 0}} // 1:*
	msgs, err := f.cl.Fetch(all, &imap.FetchOptions{UID: true, InternalDate: true}).Collect()
	if err != nil {
		return nil, f.fail(ctx, fmt.Errorf("listing messages: %w", err))
	}
	out := make([]entry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, entry{uid: uint32(m.UID), date: m.InternalDate})
	}
	return out, nil
}

func (f *imapFolder) bodies(ctx context.Context, uids []uint32, fn func(uint32, []byte) error) error {
	if len(uids) == 0 {
		return nil
	}
	defer f.bind(ctx)()
	var set imap.UIDSet
	for _, u := range uids {
		set.AddNum(imap.UID(u))
	}
	whole := &imap.FetchItemBodySection{Peek: true}
	cmd := f.cl.Fetch(set, &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{whole}})
	var ferr error
	// One message at a time: a month of mail is never held whole.
	for m := cmd.Next(); m != nil; m = cmd.Next() {
		buf, err := m.Collect()
		if err != nil || ferr != nil {
			ferr = firstErr(ferr, err)
			continue // the rest is drained by Close
		}
		if buf.UID == 0 || len(buf.BodySection) == 0 {
			// An unsolicited FETCH: flags another client set, on this message or another.
			// It may carry a UID, even that of a message expunged since; it is no answer.
			continue
		}
		ferr = fn(uint32(buf.UID), buf.FindBodySection(whole))
	}
	if err := cmd.Close(); err != nil {
		return f.fail(ctx, fmt.Errorf("fetching messages: %w", err))
	}
	return ferr
}

func (f *imapFolder) close(ctx context.Context) error {
	// ctx ends a logout that hangs; a failed one changes nothing, the session being
	// read-only.
	release := f.bind(ctx)
	_ = f.cl.Logout().Wait()
	release()
	return f.cl.Close()
}

// fail is err, or the context's cause when the context ended the command.
func (f *imapFolder) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// firstErr is the first non-nil error.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
