// Package identity signs what a service writes with the service's own ed25519 key (an
// nkey, as NATS's own nkeys library makes them) and checks what a service reads against
// the public keys an administrator registered.
//
// # Who holds what
//
// Each service holds its own seed (a secret of that service alone). Its public key, and
// each approver's, is registered in the KV bucket cairn-keys, which only the admin user may
// write (cairn init, cairn approver add); services may only read it. A reader checks a
// signature against the key registered for the name it carries, never against the key the
// signed value itself names: a user who may write a bucket, but holds no seed, cannot make a
// signature any reader accepts.
//
// # What is signed
//
// A signature covers a domain (what kind of value: a checkpoint record, a saga record, an
// outbox message, an approval) and the value's bytes, so a signature made for one kind of
// value is never accepted for another.
//
// # Before keys existed
//
// Values written before this release carry no signature. cairn init, when it first
// registers keys, records a seal: the last revision of the checkpoint bucket and the last
// sequence of the saga and outbox streams at that moment. A reader accepts an unsigned value
// only at or below its seal: what the old release wrote, once, and nothing written since.
package identity
