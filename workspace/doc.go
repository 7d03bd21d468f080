// Package workspace does the file work of runs' workspaces on hostile
// input: it checks workspace archives (tar, tar.gz, zip) entry by entry
// before anything is written (Inspect), unpacks them and writes inline
// files into a directory without ever leaving it (Unpack, WriteFiles), and
// collects artifacts out of a directory without following a symlink or
// reading past a byte budget (Collect).
//
// Every path goes through an os.Root: nothing an archive or a run put in
// the directory can lead a write or a read outside it. Archives may hold
// only regular files and directories; links, devices, FIFOs, sockets,
// setuid, setgid and sticky bits, duplicate paths, more entries or more
// bytes than the limits are refused, naming the entry. Bytes are counted
// as they are read, whatever the headers claim, so a decompression bomb
// stops at the limit, and memory stays a fixed buffer whatever the sizes.
//
// It uses the standard library and doublestar (artifact globs) only.
package workspace
