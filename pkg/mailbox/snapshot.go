package mailbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Snapshot is a run's input frozen: the folder, its UIDVALIDITY and the messages of the
// run, each with its attachments by digest. It is JSON, a source step's output.
type Snapshot struct {
	Folder      string `json:"folder"`
	UIDValidity uint32 `json:"uid_validity"`
	// HighestUID is the highest UID the folder had given at the freeze (its UIDNEXT less
	// one): a message above it arrived after the freeze and is never part of the run.
	HighestUID uint32 `json:"highest_uid"`
	// Cutoff, when set, left out the messages that arrived (INTERNALDATE) at or after it.
	Cutoff   time.Time `json:"cutoff,omitzero"`
	Messages []Message `json:"messages"`
}

// Message is one message of the run, by UID.
type Message struct {
	UID         uint32       `json:"uid"`
	Date        time.Time    `json:"date"` // INTERNALDATE: when the server received it
	Attachments []Attachment `json:"attachments"`
}

// Attachment is one attachment of a message: its file name, its size and the digest of its
// bytes, the transfer encoding removed ("sha256:<hex>", as idempotency.Digest).
type Attachment struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// Freeze reads the run's input from folder: it connects with c, examines the folder
// (read-only: no flag is set, nothing is expunged) and returns the messages of the run with
// their attachments by digest.
//
// The messages of the run are those the folder held at the freeze (UID up to UIDNEXT less
// one) that arrived before cutoff (INTERNALDATE); a zero cutoff takes every one. A
// message's INTERNALDATE is compared to the instant, not only the day as IMAP's SEARCH
// BEFORE would. Mail that arrives after the freeze is never part of the run, whatever its
// date: a mail for the month that comes late belongs to the next run.
func Freeze(ctx context.Context, c Config, folder string, cutoff time.Time) (Snapshot, error) {
	if err := errors.Join(c.Validate(), validFolder(folder)); err != nil {
		return Snapshot{}, err
	}
	f, err := examine(ctx, c, folder)
	if err != nil {
		return Snapshot{}, err
	}
	defer f.close(ctx)
	st := f.status()
	entries, err := f.list(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("freezing folder %q: %w", folder, err)
	}
	s := Snapshot{Folder: folder, UIDValidity: st.validity, Cutoff: cutoff.UTC(), Messages: []Message{}}
	if st.uidNext > 0 {
		s.HighestUID = st.uidNext - 1
	} else { // a server that does not say: the highest listed
		for _, e := range entries {
			s.HighestUID = max(s.HighestUID, e.uid)
		}
	}
	dates := map[uint32]time.Time{}
	var uids []uint32
	for _, e := range entries {
		if e.uid <= s.HighestUID && (cutoff.IsZero() || e.date.Before(cutoff)) {
			uids = append(uids, e.uid)
			dates[e.uid] = e.date.UTC()
		}
	}
	slices.Sort(uids)
	err = f.bodies(ctx, uids, func(uid uint32, raw []byte) error {
		parts, err := attachments(raw)
		if err != nil {
			return fmt.Errorf("message %d: %w", uid, err)
		}
		s.Messages = append(s.Messages, Message{UID: uid, Date: dates[uid], Attachments: describe(parts)})
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("freezing folder %q: %w", folder, err)
	}
	// A message expunged between the list and the fetch is not in the run: it was gone
	// before the freeze ended.
	slices.SortFunc(s.Messages, func(a, b Message) int { return cmp.Compare(a.UID, b.UID) })
	return s, nil
}

func describe(parts []part) []Attachment {
	out := make([]Attachment, len(parts))
	for i, p := range parts {
		out[i] = Attachment{Name: p.name, Size: int64(len(p.data)), Digest: idempotency.Digest(p.data)}
	}
	return out
}

// Fingerprint is the digest of what the run read: the folder, its UIDVALIDITY, and each
// message's UID with its attachments' names and digests. It is what a source step gives
// runner.Attempt.Fingerprint; the dates and the cut-off are left out, since a UID's message
// cannot change in IMAP without the UID or the UIDVALIDITY changing.
func (s Snapshot) Fingerprint() string {
	type att struct {
		Name   string `json:"n"`
		Digest string `json:"d"`
	}
	type msg struct {
		UID uint32 `json:"u"`
		Att []att  `json:"a"`
	}
	v := struct {
		Folder   string `json:"f"`
		Validity uint32 `json:"v"`
		Messages []msg  `json:"m"`
	}{Folder: s.Folder, Validity: s.UIDValidity, Messages: make([]msg, len(s.Messages))}
	for i, m := range s.Messages {
		v.Messages[i] = msg{UID: m.UID, Att: make([]att, len(m.Attachments))}
		for j, a := range m.Attachments {
			v.Messages[i].Att[j] = att{a.Name, a.Digest}
		}
	}
	b, _ := json.Marshal(v) // plain structs: cannot fail, and encode the same way each time
	return idempotency.Digest(b)
}

// Distinct is one attachment content of the snapshot and every message that carries it: a
// sender who sent the same file twice is one Distinct with two UIDs, to be reconciled
// once.
type Distinct struct {
	Digest string   `json:"digest"`
	Size   int64    `json:"size"`
	Name   string   `json:"name"` // as the first message that carries it names it
	UIDs   []uint32 `json:"uids"` // ascending, each once
}

// Unique lists each distinct attachment content once, in the order of the first message
// that carries it.
func (s Snapshot) Unique() []Distinct {
	var out []Distinct
	at := map[string]int{}
	for _, m := range s.Messages {
		for _, a := range m.Attachments {
			i, seen := at[a.Digest]
			if !seen {
				at[a.Digest] = len(out)
				out = append(out, Distinct{Digest: a.Digest, Size: a.Size, Name: a.Name, UIDs: []uint32{m.UID}})
				continue
			}
			if u := out[i].UIDs; u[len(u)-1] != m.UID {
				out[i].UIDs = append(u, m.UID)
			}
		}
	}
	return out
}

// message is the frozen message uid.
func (s Snapshot) message(uid uint32) (Message, bool) {
	i, ok := slices.BinarySearchFunc(s.Messages, uid, func(m Message, u uint32) int { return cmp.Compare(m.UID, u) })
	if !ok {
		return Message{}, false
	}
	return s.Messages[i], true
}
