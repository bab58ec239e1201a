package devstack

import "strconv"

// echoScript serves TCP on 127.0.0.1:$ARGV[0]: each connection first gets
// the line "echo from <pod name>", then every byte it sends back. It is
// Perl because perl-base is part of every Debian system (Essential), so a
// dev pod can run it without anything installed; one process per
// connection, as a forking server.
const echoScript = `use IO::Socket::INET;
$SIG{CHLD} = "IGNORE";
my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0], Listen => 256, ReuseAddr => 1)
  or die "listen on $ARGV[0]: $!\n";
$| = 1;
print "echo: listening on 127.0.0.1:$ARGV[0]\n";
while (1) {
  my $c = $l->accept or next;
  if (fork() == 0) {
    close $l;
    syswrite($c, "echo from $ENV{HOSTNAME}\n");
    while (1) {
      my $n = sysread($c, my $buf, 65536);
      last if !$n;
      my $off = 0;
      while ($off < $n) { my $w = syswrite($c, $buf, $n - $off, $off); exit 1 if !defined $w; $off += $w }
    }
    exit 0;
  }
  close $c;
}`

// EchoCommand is a work pod command that serves a TCP echo on its own
// loopback's port (see echoScript): what the run-live tests and `dev up`'s
// docs forward to. Its log's first line says when it listens.
func EchoCommand(port int) []string {
	return []string{"perl", "-e", echoScript, strconv.Itoa(port)}
}
