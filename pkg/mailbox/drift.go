package mailbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Check names each change of the mailbox since the freeze that the run would see: the
// folder gone or recreated (another UIDVALIDITY; nothing else is compared then, every UID
// names another message), a message of the snapshot removed, an attachment of one gone,
// added or changed (with both digests). It is what a step that checks the source runs
// after a break (runner.SourceChecker). Mail that arrived after the freeze, the messages
// the cut-off left out, and flags are not the run's input and never a change. No change is
// an empty list; err is for a mailbox that could not be read.
func (s Snapshot) Check(ctx context.Context, c Config) (changed []string, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	f, gone, err := s.open(ctx, c)
	if err != nil {
		return nil, err
	}
	if gone != "" {
		return []string{gone}, nil
	}
	defer f.close(ctx)
	uids := make([]uint32, len(s.Messages))
	for i, m := range s.Messages {
		uids[i] = m.UID
	}
	seen := make(map[uint32][]string, len(uids))
	err = f.bodies(ctx, uids, func(uid uint32, raw []byte) error {
		m, ok := s.message(uid)
		if !ok {
			return nil // not asked for
		}
		parts, err := attachments(raw)
		if err != nil {
			return fmt.Errorf("message %d: %w", uid, err)
		}
		seen[uid] = s.compare(m, parts)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking folder %q: %w", s.Folder, err)
	}
	changed = []string{}
	for _, m := range s.Messages { // in UID order, whatever order the server answered in
		c, ok := seen[m.UID]
		if !ok {
			changed = append(changed, s.removed(m.UID))
		}
		changed = append(changed, c...)
	}
	return changed, nil
}

// open examines the snapshot's folder; gone names how it is no longer the one frozen
// (missing, or another UIDVALIDITY), and then f is nil.
func (s Snapshot) open(ctx context.Context, c Config) (f folder, gone string, err error) {
	f, err = examine(ctx, c, s.Folder)
	if errors.Is(err, errNoFolder) {
		return nil, fmt.Sprintf("folder %q no longer exists (UIDVALIDITY was %d)", s.Folder, s.UIDValidity), nil
	}
	if err != nil {
		return nil, "", err
	}
	if v := f.status().validity; v != s.UIDValidity {
		f.close(ctx)
		return nil, fmt.Sprintf("folder %q: UIDVALIDITY %d is now %d: the folder was recreated and its UIDs name other messages", s.Folder, s.UIDValidity, v), nil
	}
	return f, "", nil
}

func driftOr(gone string, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", ErrDrift, gone)
}

func (s Snapshot) removed(uid uint32) string {
	return fmt.Sprintf("folder %q: message %d was removed", s.Folder, uid)
}

// compare names how the attachments parts of message m differ from the frozen ones, by
// position.
func (s Snapshot) compare(m Message, parts []part) []string {
	var out []string
	at := func(name string) string {
		return fmt.Sprintf("folder %q: message %d, attachment %q", s.Folder, m.UID, name)
	}
	for i, a := range m.Attachments {
		if i >= len(parts) {
			out = append(out, fmt.Sprintf("%s (%s) is gone", at(a.Name), a.Digest))
			continue
		}
		d := idempotency.Digest(parts[i].data)
		switch {
		case parts[i].name != a.Name:
			out = append(out, fmt.Sprintf("%s (%s) is now %q (%s)", at(a.Name), a.Digest, parts[i].name, d))
		case d != a.Digest:
			out = append(out, fmt.Sprintf("%s: %s is now %s", at(a.Name), a.Digest, d))
		}
	}
	for _, p := range parts[min(len(parts), len(m.Attachments)):] {
		out = append(out, fmt.Sprintf("%s (%s) is new", at(p.name), idempotency.Digest(p.data)))
	}
	return out
}

func attachmentIndex(as []Attachment, name string) int {
	for i, a := range as {
		if a.Name == name {
			return i
		}
	}
	return -1
}
