package protocol

// Len is the body's length in bytes (the request's Content-Length).
func (u *Upload) Len() int64 { return int64(len(u.body)) }
