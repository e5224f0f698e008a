package outbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Transport hands rendered messages to the outside world. Two implementations ship
// here: FileTransport (one .eml file a message) and SMTPTransport (a local relay).
type Transport interface {
	// Deliver hands the rendered message over. An error wrapping ErrPermanent means
	// the outside system refused it for good; any other error is worth a retry.
	Deliver(ctx context.Context, m Message, raw []byte) error
	// Delivered reports whether a message that may have gone did go (file: its file
	// exists). A transport that cannot be asked afterwards (SMTP) reports false.
	Delivered(ctx context.Context, m Message) (bool, error)
}

// FileTransport writes each message to <Dir>/<hex sha256 of key>.eml, or under
// <Dir>/shadow/ for a shadow run's message. A file is written whole to a temporary
// file first and linked into place without replacing, so a message's file either
// does not exist or is complete, and an existing file means sent.
type FileTransport struct {
	Dir string
}

// Path is where the message's file goes.
func (t FileTransport) Path(m Message) string {
	return filepath.Join(t.folder(m), keyHash(m.Key)+".eml")
}

func (t FileTransport) folder(m Message) string {
	if m.Shadow {
		return filepath.Join(t.Dir, "shadow")
	}
	return t.Dir
}

// Deliver writes the file unless it already exists.
//
// The temporary file is .<hex>.tmp in the same folder: a leftover from a sender that
// died is replaced. Two live senders never write one key at once, because the
// sender claims the key's mark before it delivers.
func (t FileTransport) Deliver(ctx context.Context, m Message, raw []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing mail file of %q: %w", m.Key, err)
	}
	dir := t.folder(m)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating mail folder %q: %w", dir, err)
	}
	final := t.Path(m)
	if _, err := os.Lstat(final); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking mail file %q: %w", final, err)
	}
	tmp := filepath.Join(dir, "."+keyHash(m.Key)+".tmp")
	if err := writeSynced(tmp, raw); err != nil {
		return err
	}
	defer os.Remove(tmp) //nolint:errcheck // the link is what counts; a leftover is replaced next time
	if err := os.Link(tmp, final); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("linking mail file %q: %w", final, err)
	}
	return syncDir(dir)
}

// Delivered reports whether the message's file exists.
func (t FileTransport) Delivered(ctx context.Context, m Message) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("looking for mail file of %q: %w", m.Key, err)
	}
	_, err := os.Lstat(t.Path(m))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("looking for mail file of %q: %w", m.Key, err)
	}
}

// writeSynced writes data to path, replacing what is there, and fsyncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("creating temporary mail file %q: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing temporary mail file %q: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing temporary mail file %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing temporary mail file %q: %w", path, err)
	}
	return nil
}

// syncDir makes the new link survive a crash of the machine, not only of the process.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening mail folder %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing mail folder %q: %w", dir, err)
	}
	return nil
}
