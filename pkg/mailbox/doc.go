// Package mailbox is a source a job reads over IMAP: a folder of mail frozen when the run
// starts, each attachment read by digest, and a drift check that names what changed under
// the run. It only reads: it examines the folder (EXAMINE, never SELECT), fetches with
// BODY.PEEK (no \Seen), and has no STORE, EXPUNGE or APPEND to call.
//
// # The smallest use
//
//	snap, err := mailbox.Freeze(ctx, cfg, "Reports/2026-05", cutoff) // the source step's output
//	a.Fingerprint(snap.Fingerprint())
//
//	r, err := snap.Open(ctx, cfg) // one connection for every read; ErrDrift if the folder was recreated
//	defer r.Close()
//	for _, d := range snap.Unique() { // each file once, however often it was sent
//		b, err := r.Read(ctx, d.UIDs[0], d.Name) // ErrDrift when it changed
//	}
//
// [Snapshot.Read] reads one file on a connection of its own: a step that reads a month of
// files opens a [Reader] once, and logs in once, not once a file.
//
// # The frozen input
//
// [Freeze] returns a [Snapshot]: the folder, its UIDVALIDITY, the highest UID it had given
// (UIDNEXT less one) and the run's messages: those present at the freeze whose INTERNALDATE
// (when the server received them) is before the cut-off, each with its attachments' names,
// sizes and digests ("sha256:<hex>" of the bytes with the transfer encoding removed, as
// idempotency.Digest). An attachment is a part whose Content-Disposition is "attachment" or
// that has a file name. A Snapshot is JSON: a step's output, kept in the run's record.
//
// IMAP never changes a message under its UID: a UID names one content for as long as the
// folder's UIDVALIDITY stays. So the snapshot is the input, and [Snapshot.Fingerprint]
// (folder, validity, UIDs and attachment digests) is what runner.Attempt.Fingerprint keeps.
//
// # Drift
//
// The run's input changed when the folder is gone or was recreated (another UIDVALIDITY:
// every UID names another message), when a message of the snapshot was removed, or when one
// no longer carries the attachments it had (a server that breaks the rule above).
// [Snapshot.Open] checks the folder's UIDVALIDITY when it connects, and [Reader.Read] each
// message and attachment it reads, so a message removed while a Reader is open is drift
// too; they return such a change as an error that errors.Is [ErrDrift]. [Snapshot.Check]
// lists them all, as a step that checks the source after a break reports them
// (runner.SourceChecker):
//
//	CheckSource: func(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
//		snap, err := runner.In[mailbox.Snapshot](ctx, a, "collect")
//		if err != nil {
//			return nil, err
//		}
//		return snap.Check(ctx, cfg)
//	},
//
// Mail that arrives after the freeze is not drift: it is above the snapshot's highest UID
// and belongs to the next run. Nor are messages the cut-off left out, or flags another
// client sets.
//
// # Duplicates
//
// A sender who sent the same file twice sent two messages with one attachment digest.
// [Snapshot.Unique] lists each digest once with the UIDs that carry it, so a job reconciles
// it once and can say where both copies are.
//
// # The IMAP library
//
// The package speaks IMAP through github.com/emersion/go-imap/v2, pinned at v2.0.0-beta.8, a
// beta: it is named in one file, behind the package's own small read-only interface, so that
// a new release is a change there. MIME parts are read with github.com/emersion/go-message.
package mailbox
