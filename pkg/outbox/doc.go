// Package outbox queues outside messages (debit notes, reports, withdrawals,
// handover notices) and delivers each of them once.
//
// # Model
//
// A step never talks to a mail server. It queues a [Message] with [Queue]: a
// CloudEvent on cairn.outbox.<run_id>.<kind> in the CAIRN_OUTBOX stream, whose
// Nats-Msg-Id is the message's idempotency key, so a step that repeats its queueing
// after a crash queues nothing new. Keys are built from ids only
// (<run_id>:report, <run_id>:notice:<id>, ...), never from time or attempts.
//
// Those are the default space's names (the reference night's). A pipeline hosted in its own
// assets.Space queues with [In] (cairn.<name>.outbox.<run_id>.<kind>, on CAIRN_<NAME>_OUTBOX),
// and its sender, with [SenderConfig].Space, consumes that stream and marks in
// cairn-<name>-outbox-sent; a step queues through runner.Attempt.Queue, which does both.
//
// A [Sender] consumes the stream (durable outbox-sender) and hands each message to a
// [Transport]: [FileTransport] writes <hex sha256 of key>.eml files, [SMTPTransport]
// talks to a local relay. [Render] makes the bytes, and makes the same bytes for the
// same message every time: the Date header is the queueing time, the Message-ID and
// X-Cairn-Key headers carry the key.
//
// # Marks
//
// Whether a message went is recorded in the cairn-outbox-sent bucket under
// [MarkKey] (<run_id>.<hex sha256 of key>), never in the stream:
//
//	(none) --Create--> sending --Update(rev)--> sent
//	                   sending --Update(rev)--> refused  (the outside system refused it for good)
//	(none) --Create--> cancelled                       (the compensator, with Cancel)
//	refused --Update(rev)--> cancelled                 (Cancel: it never went)
//	refused --Delete(rev)--> (none)                    (Reopen: a resume queues it again)
//
// The sender claims the mark as sending with Create before it delivers and moves it
// to sent by compare-and-set after. Because both claims are Creates, exactly one of
// "a sender took it" and "the compensator cancelled it" wins: a cancelled message is
// never delivered, and a message the compensator could not cancel gets a withdrawal.
// A sent mark means skip. A message that [SenderConfig].Admit refuses (an older
// generation, a token below its step's commit) is acked with no mark at all: it was
// never handed over, so a later Cancel still wins.
//
// # The one allowed repeat
//
// A sending mark found by a later turn means its sender died (or took longer than
// the ack wait) between claiming and marking sent: the message may have gone. The
// file transport can tell, since a file linked into place is complete: an existing
// file is marked sent without being written again, a missing one is written. SMTP
// cannot be asked afterwards, so the message is sent once more: that is the one
// repeat DESIGN.md allows for each call in flight when its owner died. The repeat is
// itself claimed by compare-and-set on the stale mark, so two senders that find it
// do not both repeat; a sending mark seen after losing such a race belongs to a live
// sender, and the message is retried later instead.
//
// # Settling
//
// Sent, already sent, cancelled and dropped messages are acked. Temporary failures
// (the relay is down, a 4xx reply, a bucket write that timed out) are handed back with
// NakWithDelay, from 100 ms doubling by delivery count up to [SenderConfig].MaxBackoff,
// each ±10% ([RetryPolicy], a package retry policy), for as long as they last: the outbox-sender durable has no delivery limit, so no
// message is ever abandoned by one. An undecodable message goes to
// [SenderConfig].Rejected and is terminated. A message the outside system refused for
// good ([ErrPermanent]: an SMTP 5xx, a webhook 3xx or 4xx), or that the sender's
// configuration does not allow ([Allow]: another From, a recipient or URL of the message's
// own choosing; [ErrForbidden], never handed to the transport), gets the mark refused, goes to
// [SenderConfig].Refused and is terminated: its run does not reach done, the supervisor
// hands it over naming the message, and a resume after the fix reopens the mark
// ([Reopen]) and queues a copy of its own (Message.Requeue).
//
// # Admission
//
// [SenderConfig].Admit applies the run's rules (RecordAdmission: generation and token,
// read from the checkpoint). A notice (Message.Notice: a handover, a wait for approval)
// is never asked about: the runs whose records cannot be trusted are the ones whose
// notice must arrive.
//
// # Signatures
//
// [Queue] with [SignedBy] signs a message as its queuing service (header Cairn-Sig). A sender
// with a [SenderConfig].Trust checks, before anything else, that the service that may queue
// the message signed it ([Trust.May]); a forged or unsigned one (past the seal) is rejected
// ([SenderConfig].Rejected) and terminated, no mark written, so it neither goes out nor
// holds up the real message of its key.
//
// # Workers
//
// A sender works on up to [SenderConfig].Workers messages at once, each turn bounded by
// [SenderConfig].Timeout, so one delivery that hangs never holds up the others.
package outbox
