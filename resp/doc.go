// Package resp serves dedup engines over the Redis protocol (RESP2, and
// RESP3 after HELLO 3), so that every Redis client deduplicates through
// dedup without a change: go-redis, redis-py, node-redis, ioredis,
// redis-cli, Jedis.
//
// # Commands
//
// The Redis dedup idiom, on the table [DefaultTable]:
//
//	SET key value NX [EX s|PX ms]  +OK when key is new, nil when it was seen within the window
//	SETNX key value                1 when new, 0 when seen
//	EXISTS key [key ...]           how many were seen (nothing is marked)
//	DBSIZE                         keys remembered
//
// A key is remembered for the whole window (Options.Engine.Window): an EX
// or PX longer than the window is an error, a shorter one holds as "at
// least". Other SET forms are errors: dedup keys cannot be overwritten or
// read back.
//
// RedisBloom's names, over named tables (each its own engine, its state
// under Options.Dir/<table>); a name not reserved is created on first write
// with the server's defaults, as RedisBloom does:
//
//	BF.RESERVE name error_rate capacity [EXPANSION n] [NONSCALING]
//	                                      capacity keys per window at error_rate
//	BF.ADD name item                      1 when new, 0 when seen
//	BF.MADD name item [item ...]          one 1 or 0 per item
//	BF.INSERT name [options] ITEMS item...  BF.MADD, creating the table as asked
//	BF.EXISTS name item, BF.MEXISTS ...   1 when seen (nothing is marked)
//	BF.CARD name                          keys remembered
//	BF.INFO name [field]                  Size and Number of filters: the plan for capacity, or more once filled
//
// EXPANSION and NONSCALING are accepted and change nothing: a table holds
// its capacity per window and forgets the oldest keys as the window
// passes; it neither expands nor fills.
//
// What Redis cannot say:
//
//	DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE] [REFRESH]
//	DEDUP.OBSERVE table key [key ...]   new, duplicate or in-flight per key
//	DEDUP.FORGET table key [key ...]    release keys in flight (processing failed)
//	DEDUP.DONE table key [key ...]      mark keys processed (EXPLICITDONE tables)
//	DEDUP.COMMIT table [checkpoint]     make the keys in flight durable, with checkpoint
//	DEDUP.CHECKPOINT table              the last committed checkpoint
//	DEDUP.STATS table                   the engine's stats
//
// DEDUP.DONE, COMMIT, CHECKPOINT and STATS of a missing table are errors;
// they create none.
//
// # Worker pools
//
// A table reserved with EXPLICITDONE has per-key completion
// ([dedup.Options.ExplicitDone], kept in its table.json as
// [TableOptions.ExplicitDone]): a key answered New stays in flight, across
// every commit, until DEDUP.DONE marks it processed (commits then make it
// durable) or DEDUP.FORGET releases it (it is New again). DEDUP.DONE
// answers how many keys it marked: keys not in flight or Done already are
// not counted; DEDUP.FORGET of a Done key releases nothing. Shutdown
// drops the keys never Done, as a crash would. Under [FsyncAlways] a
// DEDUP.DONE reply waits for the group commit holding its keys, while
// observing replies on such a table wait for none.
//
// And the connection commands clients send: PING, ECHO, AUTH, HELLO
// (2 or 3, with AUTH and SETNAME), SELECT 0, CLIENT
// SETNAME|GETNAME|SETINFO|ID, COMMAND (the command table: COUNT, LIST,
// INFO, DOCS), CONFIG GET (glob patterns over a few parameters), INFO,
// QUIT, and MULTI/EXEC/DISCARD (redis-py's default pipeline): EXEC runs the
// queued commands in order, not isolated from other connections, and a
// command refused while queuing aborts them all.
//
// A connection speaks RESP2 until HELLO 3, then RESP3: maps (BF.INFO,
// DEDUP.STATS, CONFIG GET, HELLO), booleans (BF.ADD, MADD, INSERT, EXISTS,
// MEXISTS), nulls and doubles.
//
// Every command is one entry of a command table (name, arity as Redis
// counts it, the table it works on, handler): dispatch checks the arity
// and looks the table up before the handler runs, MULTI checks what it
// queues against the same entries, and COMMAND answers from them.
//
// # Durability
//
// The engine keeps a key observed New in flight until a commit makes it
// durable; a crash forgets keys in flight. [Options.Fsync] chooses when
// the server commits:
//
//   - [FsyncAlways]: the replies to a pipeline that marked keys (SET NX,
//     SETNX, BF.ADD, BF.MADD; DEDUP.DONE under EXPLICITDONE) are held until a commit holding those keys is
//     fsynced. Connections that finish a pipeline at the same time share
//     one commit. A crash loses no key that was answered.
//   - [FsyncEverySec] (the default): every table commits each second, and
//     early once [Options.CommitKeys] keys were answered New. A crash loses
//     the keys answered since the last completed commit began: a second's
//     worth when commits are quick, more under load, since keys are
//     answered while a commit runs. Their next SET NX is +OK again.
//   - [FsyncNo]: tables commit at each snapshot (Options.SnapshotInterval)
//     and when the engine's bound on keys in flight is reached. A crash
//     loses the keys answered since.
//
// A call that reaches the engine's bound on keys in flight
// ([dedup.Options.MaxInFlight]) makes its table commit and observes again
// only the keys not yet observed: verdicts given stand. A call answered an
// error leaves none of its keys in flight (on an EXPLICITDONE table, where
// a commit frees only Done keys, that is how a call finding no room ends).
//
// DEDUP.OBSERVE never waits for a commit: DEDUP.COMMIT is its durability
// point (the background commits of everysec and no apply to its keys too).
// [Server.Shutdown] commits every table and writes its snapshot.
//
// # Limits
//
// A server is safe to expose to its network: [Options.RequirePass] makes
// every connection AUTH first (compared in constant time), and without it
// only loopback clients are served (protected mode, as Redis, unless
// [Options.Unprotected]); MaxClients
// bounds the connections, MaxArgSize, MaxArgs and MaxCommandSize bound a
// request before it is buffered (a request over them, or a malformed one,
// refused at its first bad byte, is answered an error after the commands
// before it and its connection closed, while every other connection is
// served on), MaxReplyBuffer the replies queued for a client that has not
// read them yet, MaxTables the engines a client can create. The package
// reads and writes RESP itself: a connection's read buffer holds at most
// one command the limits admit, moving unread bytes to its front before
// each read, so a client streaming commands does not grow it.
package resp
