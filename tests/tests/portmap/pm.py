# Servers and clients of the port mapping tests (tests/tests/portmap.rs), run with the system
# python inside the test's namespaces. Every mode prints its findings as words on stdout; a
# failure exits non-zero with the reason on stderr.
import socket, sys, threading, time

def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET

def dual_stack(kind):
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if kind == socket.SOCK_STREAM:
        # So that the pod may also open connections from its listening port (mode "from").
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    return s

def echo(conn, name):
    conn.sendall(name.encode() + b"\n")
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
    conn.close()

def bare(ip):
    return ip[7:] if ip.startswith("::ffff:") else ip

def listen(port, on_udp, on_tcp):
    """TCP and UDP on both families on `port`; prints "ready" once both are bound."""
    tcp = dual_stack(socket.SOCK_STREAM)
    tcp.bind(("::", port))
    tcp.listen(64)
    udp = dual_stack(socket.SOCK_DGRAM)
    udp.bind(("::", port))
    def udp_loop():
        while True:
            data, peer = udp.recvfrom(65536)
            udp.sendto(on_udp(data, peer), peer)
    threading.Thread(target=udp_loop, daemon=True).start()
    print("ready", flush=True)
    while True:
        conn, peer = tcp.accept()
        threading.Thread(target=on_tcp, args=(conn, peer), daemon=True).start()

def serve(name, port):
    """Greets with its name and echoes (TCP); answers "name:data" (UDP)."""
    listen(port, lambda data, peer: name.encode() + b":" + data, lambda conn, peer: echo(conn, name))

def whoami(port):
    """Tells each client the address and port it came from."""
    def tell(conn, peer):
        conn.sendall(("%s %d\n" % (bare(peer[0]), peer[1])).encode())
        conn.close()
    listen(port, lambda data, peer: ("%s %d" % (bare(peer[0]), peer[1])).encode(), tell)

def block(k):
    return ("%08d" % k).encode() * 128

def source(port):
    """TCP: reads "N\\n" and sends N bytes of numbered 1 KiB blocks."""
    def send(conn, peer):
        n = int(read_line(conn))
        for k in range(n // 1024):
            conn.sendall(block(k))
        conn.close()
    listen(port, lambda data, peer: b"", send)

def read_line(s):
    line = b""
    while not line.endswith(b"\n"):
        chunk = s.recv(1)
        if not chunk:
            raise SystemExit("connection closed before the end of a line")
        line += chunk
    return line.decode().strip()

def read_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise SystemExit("connection closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data

def connect(host, port, timeout):
    s = socket.socket(family(host), socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((host, port))
    return s

def tcp(host, port, msg):
    s = connect(host, port, 3)
    greeting = read_line(s)
    s.sendall(msg.encode())
    echoed = read_exactly(s, len(msg)).decode()
    peer = s.getpeername()
    print(greeting, echoed, peer[0], peer[1])

def udp(host, port, msg):
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(msg.encode(), (host, port))
    data, peer = s.recvfrom(65536)
    print(data.decode(), peer[0], peer[1])

def pair(mapped, mport, direct, dport):
    """One client of a mapped endpoint and one of the pod's own endpoint, open at once and used
    in turns: prints, for TCP then UDP, what each answered and who answered it."""
    words = []
    a, b = connect(mapped, mport, 3), connect(direct, dport, 3)
    greetings = [read_line(a), read_line(b)]
    for i in range(5):
        for s in (a, b):
            s.sendall(b"turn%d" % i)
        for s in (a, b):
            if read_exactly(s, 5) != b"turn%d" % i:
                raise SystemExit("TCP turn %d came back different" % i)
    for s, g in zip((a, b), greetings):
        words += [g, bare(s.getpeername()[0]), str(s.getpeername()[1])]
    u, v = (socket.socket(family(h), socket.SOCK_DGRAM) for h in (mapped, direct))
    for s in (u, v):
        s.settimeout(3)
    for i in range(5):
        u.sendto(b"m%d" % i, (mapped, mport))
        v.sendto(b"d%d" % i, (direct, dport))
        (du, pu), (dv, pv) = u.recvfrom(65536), v.recvfrom(65536)
    words += [du.decode(), bare(pu[0]), str(pu[1]), dv.decode(), bare(pv[0]), str(pv[1])]
    print(" ".join(words))

def from_port(proto, src, sport, host, port):
    """A connection from src:sport (a port a server of this namespace listens on too) to a
    whoami server: prints the address and port the server saw, then our own."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(family(host), kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if proto == "tcp":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.settimeout(3)
    s.bind((src, sport))
    s.connect((host, port))
    if proto == "tcp":
        seen = read_line(s)
    else:
        s.send(b"who")
        seen = s.recv(65536).decode()
    me = s.getsockname()
    print(seen, bare(me[0]), me[1])

def stream(host, port, seconds):
    s = connect(host, port, 10)
    read_line(s)
    print("port", s.getsockname()[1], flush=True)
    total, i, end = 0, 0, time.time() + seconds
    while time.time() < end:
        i += 1
        chunk = ("%08d" % i).encode() * 128
        s.sendall(chunk)
        back = read_exactly(s, len(chunk))
        if back != chunk:
            raise SystemExit("chunk %d came back different" % i)
        total += len(chunk)
        time.sleep(0.005)
    print("OK", total, i)

def fetch(host, port, total, pause_at, timeout):
    """Asks a "source" server for `total` bytes through a small receive window, checking every
    block. After `pause_at` bytes it stops reading, prints "paused" and waits for a line on
    stdin: the sender's queue fills meanwhile and is sent after the line."""
    s = socket.socket(family(host), socket.SOCK_STREAM)
    # A small window (no autotuning): what is not yet sent at the pause is sent after it.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(timeout)
    s.connect((host, port))
    s.sendall(b"%d\n" % total)
    got, k, paused, start = 0, 0, False, time.time()
    while got < total:
        if not paused and got >= pause_at:
            print("paused", got, flush=True)
            sys.stdin.readline()
            paused, start = True, time.time()
        data = read_exactly(s, 1024)
        if data != block(k):
            raise SystemExit("block %d came back different" % k)
        got, k = got + 1024, k + 1
    if s.recv(1):
        raise SystemExit("more than %d bytes" % total)
    print("OK", got, "%.3f" % (time.time() - start))

mode, args = sys.argv[1], sys.argv[2:]
if mode == "serve":
    serve(args[0], int(args[1]))
elif mode == "whoami":
    whoami(int(args[0]))
elif mode == "source":
    source(int(args[0]))
elif mode == "tcp":
    tcp(args[0], int(args[1]), args[2])
elif mode == "udp":
    udp(args[0], int(args[1]), args[2])
elif mode == "pair":
    pair(args[0], int(args[1]), args[2], int(args[3]))
elif mode == "from":
    from_port(args[0], args[1], int(args[2]), args[3], int(args[4]))
elif mode == "stream":
    stream(args[0], int(args[1]), float(args[2]))
elif mode == "fetch":
    fetch(args[0], int(args[1]), int(args[2]), int(args[3]), float(args[4]))
else:
    raise SystemExit("unknown mode " + mode)
