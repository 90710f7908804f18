// Package handovertest serves an in-process S3 (gofakes3 over an httptest
// server) for tests of [github.com/streamdedup/dedup/handover] stores: [S3] returns an s3:// URL that
// [github.com/streamdedup/dedup/handover.Open] takes, and [Open] opens a
// store for the length of a test.
package handovertest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/streamdedup/dedup/handover"
)

// Open opens the handover store at url (as
// [github.com/streamdedup/dedup/handover.Open] does), closed when t ends:
// after the test's deferred calls, and after the cleanups t registers
// later, such as the stop of a consumer that uses the store.
func Open(t testing.TB, url string) *handover.Store {
	t.Helper()
	s, err := handover.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// S3 starts an in-process S3 server holding one empty bucket, stopped when
// t ends, sets the AWS credentials of the test's environment, and returns
// the bucket's URL for [github.com/streamdedup/dedup/handover.Open]. It also returns the backend, so a
// test can damage objects behind the store's back.
func S3(t testing.TB) (string, *s3mem.Backend) {
	t.Helper()
	be := s3mem.New()
	const bucket = "handover"
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	q := url.Values{"endpoint": {srv.URL}, "region": {"us-east-1"}, "use_path_style": {"true"}, "disable_https": {"true"}}
	return fmt.Sprintf("s3://%s?%s", bucket, q.Encode()), be
}
