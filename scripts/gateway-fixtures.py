#!/usr/bin/env python3
"""Generates the gateway test keys and known-answer vectors in tests/fixtures/gateways/.

An independent implementation (Python `cryptography`, hmac, the protocol text of docs/gateways/),
so the Rust adapters are checked against something other than themselves. Test keys only.
Run from the repository root: python3 scripts/gateway-fixtures.py
"""
import base64, datetime, hashlib, hmac, json, os, urllib.parse
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa, padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

OUT = "tests/fixtures/gateways"
os.makedirs(OUT, exist_ok=True)

def key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)

def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)

def sign(k, msg):
    return base64.b64encode(k.sign(msg.encode(), padding.PKCS1v15(), hashes.SHA256())).decode()

merchant, provider = key(), key()
write("merchant_private.pem", merchant.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
write("merchant_private_pkcs1.pem", merchant.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
write("merchant_public.pem", merchant.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
write("provider_private.pem", provider.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
write("provider_public.pem", provider.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
# Alipay's console hands out the public key as bare base64.
spki = provider.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
write("provider_public_bare.txt", base64.b64encode(spki) + b"\n")
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tenpay.com Root CA test")])
serial = 0x5157F09EFDC096DE15EBE9A3F4A0A1B2C3D4E5F6
now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(provider.public_key())
        .serial_number(serial).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
        .sign(provider, hashes.SHA256()))
write("provider_cert.pem", cert.public_bytes(serialization.Encoding.PEM))

vectors = {"provider_cert_serial": format(serial, "X")}

# Alipay request signing: drop sign and empty values, sort, k=v joined with &, values raw.
params = {"app_id": "2021000000000001", "method": "alipay.trade.page.pay", "format": "JSON",
          "charset": "utf-8", "sign_type": "RSA2", "timestamp": "2026-11-30 12:00:00", "version": "1.0",
          "notify_url": "https://shop.example/notify/alipay", "return_url": "", "app_auth_token": "",
          "biz_content": '{"out_trade_no":"KS0123456789AB_1","total_amount":"88.88","subject":"茶 & 杯","product_code":"FAST_INSTANT_TRADE_PAY"}'}
content = "&".join(f"{k}={params[k]}" for k in sorted(params) if params[k] != "" and k != "sign")
vectors["alipay_request"] = {"params": params, "content": content, "sign": sign(merchant, content)}

# Alipay notification: verify without sign and sign_type.
notify = {"notify_time": "2026-11-30 12:01:02", "notify_type": "trade_status_sync", "notify_id": "ac05099524730693a8b330c5ecf72da9786",
          "app_id": "2021000000000001", "charset": "utf-8", "version": "1.0", "sign_type": "RSA2",
          "trade_no": "2026113022001400000000000001", "out_trade_no": "KS0123456789AB_1", "seller_id": "2088000000000002",
          "buyer_id": "2088102000000003", "trade_status": "TRADE_SUCCESS", "total_amount": "88.88",
          "receipt_amount": "88.88", "subject": "茶 & 杯", "gmt_payment": "2026-11-30 12:01:01"}
ncontent = "&".join(f"{k}={notify[k]}" for k in sorted(notify) if k not in ("sign", "sign_type"))
notify["sign"] = sign(provider, ncontent)
vectors["alipay_notify"] = {"body": urllib.parse.urlencode(notify), "content": ncontent}

# Alipay API response: the sign covers the raw text of the *_response node.
node = '{"code":"10000","msg":"Success","trade_no":"2026113022001400000000000001","out_trade_no":"KS0123456789AB_1","trade_status":"TRADE_SUCCESS","total_amount":"88.88"}'
vectors["alipay_response"] = {"text": '{"alipay_trade_query_response":' + node + ',"sign":"' + sign(provider, node) + '"}'}

# WeChat request signature.
body = '{"mchid":"1900000001"}'
msg = f"POST\n/v3/pay/transactions/out-trade-no/KS0123456789AB_1/close\n1764475200\nNONCE0123456789\n{body}\n"
vectors["wechat_request"] = {"message": msg, "signature": sign(merchant, msg)}
# paySign.
pmsg = "wx8888888888888888\n1764475200\n5K8264ILTKCH16CQ2502SI8ZNMTM67VS\nprepay_id=wx201410272009395522657a690389285100\n"
vectors["wechat_pay_sign"] = {"message": pmsg, "pay_sign": sign(merchant, pmsg)}
# WeChat notification: AES-256-GCM resource, header signature over ts\nnonce\nbody\n.
api_v3_key = "0123456789abcdefghijklmnopqrstuv"
resource_plain = json.dumps({"appid": "wx8888888888888888", "mchid": "1900000001", "out_trade_no": "KS0123456789AB_1",
    "transaction_id": "4200000000202611300000000001", "trade_type": "JSAPI", "trade_state": "SUCCESS",
    "trade_state_desc": "ok", "bank_type": "OTHERS", "attach": "", "success_time": "2026-11-30T12:01:01+08:00",
    "payer": {"openid": "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"}, "amount": {"total": 8888, "payer_total": 8888, "currency": "CNY", "payer_currency": "CNY"}},
    separators=(",", ":"))
nonce = "fdasflkja484"
ad = "transaction"
ct = AESGCM(api_v3_key.encode()).encrypt(nonce.encode(), resource_plain.encode(), ad.encode())
envelope = json.dumps({"id": "EV-2018022511223320873", "create_time": "2026-11-30T12:01:02+08:00", "resource_type": "encrypt-resource",
    "event_type": "TRANSACTION.SUCCESS", "summary": "支付成功", "resource": {"original_type": "transaction", "algorithm": "AEAD_AES_256_GCM",
    "ciphertext": base64.b64encode(ct).decode(), "associated_data": ad, "nonce": nonce}}, separators=(",", ":"), ensure_ascii=False)
ts, hn = "1764475262", "abcdef0123456789"
vectors["wechat_notify"] = {"api_v3_key": api_v3_key, "body": envelope, "timestamp": ts, "nonce": hn,
    "signature": sign(provider, f"{ts}\n{hn}\n{envelope}\n"), "serial": format(serial, "X")}

# Stripe: v1 = hex(HMAC-SHA256(secret, t + "." + body)).
sbody = '{"id":"evt_1QkassaTest","type":"checkout.session.completed","data":{"object":{"id":"cs_test_1","client_reference_id":"KS0123456789AB_1","payment_status":"paid","status":"complete","payment_intent":"pi_3Qkassa","amount_total":8888,"currency":"cny"}}}'
secret, st = "whsec_test_secret", "1764475262"
vectors["stripe"] = {"secret": secret, "t": st, "body": sbody,
    "v1": hmac.new(secret.encode(), f"{st}.{sbody}".encode(), hashlib.sha256).hexdigest()}

write("vectors.json", json.dumps(vectors, indent=1, ensure_ascii=False).encode())
print("wrote", OUT)
