// Package publicapi holds tests of Cairn's public surface: what every package under pkg/
// promises a reader, checked from the source so that it stays true as packages are added.
//
// # What every public package has
//
// A doc.go whose package comment begins "Package <name>", and at least one runnable
// example: a func Example… in its _test.go files that ends with an // Output: comment, so
// that go test runs it and compares what it prints (issue 34). An example without one is
// only compiled, and could print anything.
package publicapi
