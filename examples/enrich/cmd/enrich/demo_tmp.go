package main

import (
	"context"
	"errors"
	"io"
)

func demo(ctx context.Context, w io.Writer) error { return errors.New("later") }
