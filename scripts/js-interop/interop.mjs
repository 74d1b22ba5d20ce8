// Interop check: two js-libp2p peers against four `peerage run` nodes.
//
// Usage: node interop.mjs <node A> <node B> <node C> <node D>   (multiaddrs ending in /p2p/<id>)
// `scripts/js-interop/run.sh` starts the nodes (a star around A; D, the highest priority, is
// the bully leader and connected to A only, so its `Alive` heartbeats to three mostly
// unconnected members go out on the gossipsub election topic) and calls this.
//
// Peer `js` (TCP, noise, yamux, identify, ping, kad-dht, gossipsub) dials A; peer `listener`
// (identify, ping and gossipsub, no DHT, so that nobody can tell it of `js` or the other way
// round) dials C. Checks, each printed as `ok <what>` or `FAIL <what>`; exit code 1 on any
// failure:
// 1. connect to A (TCP + noise + yamux) and identify (A offers /peerage/kad/1.0.0);
// 2. ping A;
// 3. a Kademlia lookup of B on /peerage/kad/1.0.0 (cache off, so it asks the network) in
//    which A answers with B among the closer peers;
// 4. gossip on the election topic, both ways:
//    - `js` sees the node's subscription and receives a signed election broadcast that a
//      node published (D's heartbeat, relayed by A);
//    - `js` publishes a signed, well-formed broadcast (addressed to nobody, scope 0) and
//      `listener` receives it through C: a node forwards a gossipsub message only after its
//      own validation accepted it, and `listener` is connected to C alone;
//    - `js` is still connected afterwards (not banned);
//    - `js` publishes a malformed message: `listener` does not receive it (the nodes'
//      validation rejects it, so it is not relayed) and A bans `js` (one invalid gossip
//      message weighs the whole ban threshold, `overlay/src/reputation.rs`).
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { kadDHT } from '@libp2p/kad-dht'
import { gossipsub } from '@libp2p/gossipsub'
import { multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'

const addrs = process.argv.slice(2).map(multiaddr)
if (addrs.length !== 4) {
  console.error('usage: node interop.mjs <node A> <node B> <node C> <node D> (multiaddrs ending in /p2p/<id>)')
  process.exit(2)
}
const [a, b, c] = addrs
const idOf = (ma) => peerIdFromString(ma.toString().split('/p2p/')[1])
const nodeIds = addrs.map(idOf)
const [aId, bId, cId] = nodeIds
const isNode = (p) => nodeIds.some((n) => n.equals(p))

const KAD = '/peerage/kad/1.0.0'
const TOPIC = 'peerage/election/0'
// postcard BroadcastFrame { version 1, to: List([]), frame: overlay::wire frame
// { version 1, Election { scope 0, msg: Alive } } }: well-formed, addressed to nobody.
const BROADCAST = Uint8Array.from([0x01, 0x03, 0x00, 0x04, 0x01, 0x00, 0x00, 0x03])
// Not a BroadcastFrame (version 0xff): the nodes' validation rejects it.
const GARBAGE = Uint8Array.from([0xff, 0xff, 0x01, 0x02, 0x03])
// The election messages a heartbeat or announcement carries (overlay `Message` variants).
const KINDS = { 2: 'Coordinator', 3: 'Alive' }

let failed = false
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} ${what}`)
  if (!ok) failed = true
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const waitFor = async (pred, ms) => {
  for (let t = 0; t < ms && !pred(); t += 100) await sleep(100)
  return pred()
}
const equalBytes = (x, y) => x.length === y.length && x.every((v, i) => v === y[i])
// A node's election broadcast: envelope version 1, ending in its frame
// [len 4][wire version 1][Body::Election][scope 0][message variant].
const electionKind = (data) =>
  data[0] === 0x01 && data.length >= 5 && equalBytes(data.slice(-5, -1), [0x04, 0x01, 0x00, 0x00])
    ? KINDS[data[data.length - 1]]
    : undefined

const base = {
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()]
}
const js = await createLibp2p({
  ...base,
  services: {
    identify: identify(),
    ping: ping(),
    dht: kadDHT({ protocol: KAD, clientMode: false, peerInfoMapper: (p) => p }),
    pubsub: gossipsub({ emitSelf: false })
  }
})
const listener = await createLibp2p({
  ...base,
  // ping too: libp2p's connection monitor pings every connection, and a rust-libp2p node
  // (libp2p-ping 0.48) stops answering inbound pings on a connection whose remote refused its
  // own ping, so a peer without the ping protocol is cut off by its own monitor after ~15 s.
  services: { identify: identify(), ping: ping(), pubsub: gossipsub({ emitSelf: false }) }
})

const fromNode = [] // election kinds of node-published messages `js` received
js.services.pubsub.addEventListener('message', ({ detail: m }) => {
  if (m.topic === TOPIC && m.type === 'signed' && isNode(m.from)) fromNode.push(electionKind(m.data) ?? 'other')
})
const heard = [] // messages `listener` received that `js` published
listener.services.pubsub.addEventListener('message', ({ detail: m }) => {
  if (m.topic === TOPIC && m.type === 'signed' && m.from.equals(js.peerId)) heard.push(m.data)
})

try {
  // 1. connect and identify
  const conn = await js.dial(a)
  check(conn.status === 'open' && conn.remotePeer.equals(aId), 'connect to node A (TCP + noise + yamux)')
  let protocols = []
  for (let t = 0; t < 5000 && !protocols.includes(KAD); t += 100) {
    await sleep(100)
    protocols = (await js.peerStore.get(aId)).protocols
  }
  check(protocols.includes(KAD), `identify: ${protocols.length} protocols, ${KAD} among them`)

  // 2. ping
  const rtt = await js.services.ping.ping(a)
  check(Number.isFinite(rtt), `ping node A: ${rtt} ms`)

  // 3. DHT lookup of B, answered by A
  js.services.pubsub.subscribe(TOPIC)
  listener.services.pubsub.subscribe(TOPIC)
  await listener.dial(c)
  await waitFor(() => js.services.dht.routingTable.size > 0, 10000)
  console.log(`  js routing table: ${js.services.dht.routingTable.size} peer(s)`)
  let answeredByA = false
  let found = false
  try {
    for await (const ev of js.services.dht.findPeer(bId, { useCache: false, signal: AbortSignal.timeout(20000) })) {
      if (ev.name === 'PEER_RESPONSE' && ev.from.equals(aId) && ev.closer.some((p) => p.id.equals(bId))) {
        answeredByA = true
      }
      if (ev.name === 'FINAL_PEER' && ev.peer.id.equals(bId)) found = true
    }
  } catch (e) {
    console.log(`  findPeer: ${e.message}`)
  }
  check(found && answeredByA, `DHT lookup of node B: found ${found}, in node A's answer ${answeredByA}`)

  // 4. gossip
  const subscribed = await waitFor(() => js.services.pubsub.getSubscribers(TOPIC).some((p) => p.equals(aId)), 10000)
  check(subscribed, 'gossip: node A is subscribed to the election topic')
  const got = await waitFor(() => fromNode.length > 0, 15000)
  check(got, `gossip: js received ${fromNode.length} signed node broadcast(s) (${[...new Set(fromNode)].join(', ')})`)

  await waitFor(() => listener.services.pubsub.getSubscribers(TOPIC).some((p) => p.equals(cId)), 10000)
  const direct = js.getConnections(listener.peerId).length + listener.getConnections(js.peerId).length
  const listenerPeers = listener.getConnections().map((x) => x.remotePeer)
  check(
    direct === 0 && listenerPeers.length > 0 && listenerPeers.every((p) => p.equals(cId)),
    `gossip: listener is connected to node C only, not to js (connected to ${listenerPeers.join(', ')})`
  )
  const res = await js.services.pubsub.publish(TOPIC, BROADCAST)
  console.log(`  js published a broadcast to ${res.recipients.length} node(s)`)
  const relayed = await waitFor(() => heard.some((d) => equalBytes(d, BROADCAST)), 10000)
  check(relayed, 'gossip: the nodes accepted js\'s broadcast and relayed it to the listener')
  await sleep(2000)
  check(js.getConnections(aId).length > 0, 'still connected to node A after publishing (not banned)')

  await js.services.pubsub.publish(TOPIC, GARBAGE)
  await sleep(3000)
  check(!heard.some((d) => equalBytes(d, GARBAGE)), 'gossip: a malformed message from js is not relayed')
  check(js.getConnections(aId).length === 0, 'node A disconnected (banned) js after the malformed message')
} catch (e) {
  check(false, `unexpected error: ${e.stack ?? e}`)
} finally {
  await Promise.all([js.stop(), listener.stop()])
}
process.exit(failed ? 1 : 0)
