// Package resp serves dedup engines over the Redis protocol (RESP2, on
// github.com/tidwall/redcon), so that every Redis client deduplicates
// through dedup without a change: go-redis, redis-py, redis-cli, Jedis.
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
// A key is remembered for the whole window (Config.Engine.Window): an EX
// or PX longer than the window is an error, a shorter one holds as "at
// least". Other SET forms are errors: dedup keys cannot be overwritten or
// read back.
//
// RedisBloom's names, over named tables (each its own engine, its state
// under Config.Dir/<table>); a name not reserved is created on first write
// with the server's defaults, as RedisBloom does:
//
//	BF.RESERVE name error_rate capacity   capacity keys per window at error_rate
//	BF.ADD name item                      1 when new, 0 when seen
//	BF.MADD name item [item ...]          one 1 or 0 per item
//	BF.EXISTS name item, BF.MEXISTS ...   1 when seen (nothing is marked)
//	BF.INFO name [field]                  Size and Number of filters: the plan for capacity, or more once filled
//
// What Redis cannot say:
//
//	DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE]
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
// And the connection commands clients send: PING, ECHO, AUTH, HELLO (an
// error: RESP2 only, clients fall back), SELECT 0, CLIENT
// SETNAME|GETNAME|SETINFO|ID, COMMAND (empty), CONFIG GET (a few
// parameters), INFO, QUIT, and MULTI/EXEC/DISCARD (redis-py's default
// pipeline): EXEC runs the queued commands in order, not isolated from
// other connections, and a command refused while queuing aborts them all.
//
// # Durability
//
// The engine keeps a key observed New in flight until a commit makes it
// durable; a crash forgets keys in flight. [Config.Fsync] chooses when
// the server commits:
//
//   - [FsyncAlways]: the replies to a pipeline that marked keys (SET NX,
//     SETNX, BF.ADD, BF.MADD; DEDUP.DONE under EXPLICITDONE) are held until a commit holding those keys is
//     fsynced. Connections that finish a pipeline at the same time share
//     one commit. A crash loses no key that was answered.
//   - [FsyncEverySec] (the default): every table commits each second. A
//     crash loses the keys answered in the last second or so: their next
//     SET NX is +OK again.
//   - [FsyncNo]: tables commit at each snapshot (Config.SnapshotInterval)
//     and when the engine's bound on keys in flight is reached. A crash
//     loses the keys answered since.
//
// DEDUP.OBSERVE never waits for a commit: DEDUP.COMMIT is its durability
// point (the background commits of everysec and no apply to its keys too).
// [Server.Shutdown] commits every table and writes its snapshot.
//
// # Limits
//
// A server is safe to expose to its network: [Config.RequirePass] makes
// every connection AUTH first (compared in constant time), and without it
// only loopback clients are served (protected mode, as Redis, unless
// [Config.Unprotected]); MaxClients
// bounds the connections, MaxArgSize, MaxArgs and MaxCommandSize bound a
// request before it is buffered (a request over them, or a malformed one,
// is answered an error and its connection closed, while every other
// connection is served on; the commands read with a malformed one are
// dropped unrun), MaxReplyBuffer the replies queued for a
// client that has not read them yet, MaxTables the engines a client can
// create.
package resp
