// Interop check: a js-libp2p peer against two `peerage run` nodes.
//
// Usage: node interop.mjs <multiaddr of node A> <multiaddr of node B>
// (both ending in /p2p/<peer id>; `scripts/js-interop/run.sh` starts the nodes and calls this).
//
// Checks, each printed as `ok <what>` or `FAIL <what>`, exit code 1 on any failure:
// connect (TCP + noise + yamux) and identify; ping; a Kademlia lookup of node B's peer id
// through node A (/peerage/kad/1.0.0) that finds B; gossip on the election topic both ways:
// the js peer sees the node's subscription, publishes a well-formed broadcast the node
// accepts (addressed to nobody, scope 0), and stays connected (not banned).
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { kadDHT } from '@libp2p/kad-dht'
import { gossipsub } from '@chainsafe/libp2p-gossipsub'
import { multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'

const [a, b] = process.argv.slice(2).map(multiaddr)
if (!a || !b) {
  console.error('usage: node interop.mjs <node A multiaddr> <node B multiaddr>')
  process.exit(2)
}
const TOPIC = 'peerage/election/0'
let failed = false
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'} ${what}`)
  if (!ok) failed = true
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const node = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: {
    identify: identify(),
    ping: ping(),
    dht: kadDHT({ protocol: '/peerage/kad/1.0.0', clientMode: false, peerInfoMapper: (p) => p }),
    pubsub: gossipsub({ emitSelf: false, allowPublishToZeroTopicPeers: true })
  }
})

try {
  const conn = await node.dial(a)
  check(conn.status === 'open', `connect to ${a} (TCP + noise + yamux)`)
  const rtt = await node.services.ping.ping(a)
  check(Number.isFinite(rtt), `ping: ${rtt} ms`)
  await sleep(1500)
  const protocols = (await node.peerStore.get(conn.remotePeer)).protocols
  check(protocols.includes('/peerage/kad/1.0.0'), `identify: ${protocols.length} protocols, kad among them`)

  // DHT: find node B through node A, once A is in the js peer's routing table.
  node.services.pubsub.subscribe(TOPIC)
  for (let i = 0; i < 40 && node.services.dht.routingTable.size === 0; i++) await sleep(250)
  console.log(`  routing table: ${node.services.dht.routingTable.size} peer(s)`)
  const bId = peerIdFromString(b.toString().split('/p2p/')[1])
  let found = false
  try {
    const info = await node.peerRouting.findPeer(bId, { signal: AbortSignal.timeout(20000) })
    found = info.id.equals(bId)
  } catch (e) {
    console.log(`  findPeer: ${e.message}`)
  }
  check(found, 'DHT lookup of node B through node A')

  // Gossip: subscribe, see the node's subscription, publish a broadcast the node accepts:
  // postcard BroadcastFrame { version 1, to: List([]), frame: wire { version 1,
  // Election { scope 0, msg: Alive } } }.
  let seen = false
  for (let i = 0; i < 40 && !seen; i++) {
    seen = node.services.pubsub.getSubscribers(TOPIC).some((p) => p.equals(conn.remotePeer))
    await sleep(250)
  }
  check(seen, 'gossip: the node is subscribed to the election topic')
  const frame = Uint8Array.from([0x01, 0x03, 0x00, 0x04, 0x01, 0x00, 0x00, 0x03])
  const res = await node.services.pubsub.publish(TOPIC, frame)
  check(res.recipients.length >= 1, `gossip: published to ${res.recipients.length} peer(s)`)
  await sleep(3000)
  check(node.getConnections(conn.remotePeer).length > 0, 'still connected after publishing (not banned)')
} catch (e) {
  check(false, `unexpected error: ${e.stack ?? e}`)
} finally {
  await node.stop()
}
process.exit(failed ? 1 : 0)
