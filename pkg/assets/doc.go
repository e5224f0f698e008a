// Package assets defines every NATS asset Cairn uses (streams, consumers, key-value buckets,
// the object store) in one place.
//
// # Who creates, who checks
//
// Ensure, run by `cairn init` (and `cairn dev`), creates what is missing and compares what
// exists; it never deletes, recreates or silently changes an asset: a live bucket recreated
// would restart its revisions at 1 and make old fencing tokens valid again. Check, run by every
// service at start, only looks assets up and compares them. Both report a mismatch naming the
// asset and the field.
//
// # Replicas
//
// Config.Replicas (CAIRN_REPLICAS: 1, 3 or 5) is the replicas of every stream, bucket, the
// object store and every durable consumer. With one replica, CAIRN_STEPS persists
// asynchronously (a lost step event is derived again from the checkpoint); replicated
// assets use the server's persistence, since the server refuses asynchronous persistence on
// them. An existing asset with other replicas is a mismatch, reported by Ensure and Check,
// never moved: moving an asset to other replicas is the operator's decision, made with the
// server's tools.
//
// # The epoch
//
// The checkpoint bucket's stream carries a random cairn.epoch in its metadata, set when the
// bucket is created. Records and fences carry it, so a run whose databases outlived its NATS
// storage is recognised as foreign.
package assets
