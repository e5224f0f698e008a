// Package events defines the messages Cairn exchanges over NATS: CloudEvents
// 1.0, their types and data, the subjects they travel on, and their encoding
// to and from NATS messages.
//
// # Binary mode
//
// Every message Cairn publishes is a CloudEvent in binary mode: each attribute
// is a header (ce-specversion, ce-id, ce-type, ce-source, ce-subject, ce-time,
// ce-datacontenttype, and ce-traceparent when a trace is running) and the
// data, always JSON, is the body. Headers keep the body the plain JSON a
// person expects from `nats sub`, and let a consumer route on the type
// without parsing the body. [Encode] and [Decode] go through the encode and
// decode helpers of the CloudEvents NATS binding (never its sender or
// receiver, which create streams and ack before processing); [Decode] also
// accepts structured mode, the whole event as a JSON body.
//
// Types are io.cairn.<noun>.<verb>.v1; the source is /cairn/<service>; the
// subject attribute is the run id; ce-time is UTC with nanoseconds.
//
// # Ids are idempotency keys
//
// An event's id is built from ids only, never from a clock or an attempt
// number (see [StepReadyID], [AuditStepID], [AuditItemID], [RejectedID]), and
// [Encode] copies it into Nats-Msg-Id. A publish retried after a lost ack
// therefore carries the same id, and JetStream reports it as a duplicate
// instead of storing it twice. Deduplication only lasts the stream's window:
// it saves work, while consumers stay idempotent through the checkpoint.
//
// # Validation
//
// [Decode] refuses, with an error wrapping [ErrInvalid] that names the
// problem, anything Cairn cannot act on: data over [MaxSize], a specversion
// other than 1.0, a missing id, type, source or subject, an unknown type, a
// run id that fails [ValidID] (a dot or a star would break subjects and
// keys), or data that is not JSON. [Event.Unmarshal] refuses unknown fields.
// A refused message is recorded on [RejectedSubject] as a [Rejected].
//
// # Commands from plain nats pub
//
// An operator can drive Cairn with the NATS CLI alone:
//
//	nats pub cairn.runs.start '{"warehouse":"ldh","date":"2026-10-13"}'
//	nats pub cairn.runs.run-2026-10-13-ldh.approve ''
//
// On a cairn.runs.> subject, [DecodeCommand] takes a message without
// ce-specversion as the data of the subject's command, an empty body being
// {}. Its id is the data's request_id or, without one, the caller's fallback
// (the stream sequence), so a redelivered command is still recognised as
// the same command. A message with CloudEvent headers is decoded as usual.
package events
