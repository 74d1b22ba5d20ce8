// Node 20 lacks Promise.withResolvers (Node 22 has it); js-libp2p 3 uses it.
if (!Promise.withResolvers) {
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((a, b) => { resolve = a; reject = b })
    return { promise, resolve, reject }
  }
}
