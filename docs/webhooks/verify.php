<?php
// A shop's webhook endpoint for kassa, verifying every message before acting on it. Serve it with
// your web server (or `php -S 127.0.0.1:8081 verify.php`), with KASSA_WEBHOOK_SECRET set.
// Answers 204 for a message it accepts and 400 for one whose signature does not verify or whose
// time is more than five minutes off.

const TOLERANCE_SECONDS = 300;

/** Throws unless $header (Kassa-Signature) signs $body (the raw bytes). */
function kassa_verify(string $secret, string $header, string $body, int $now): void
{
    $fields = [];
    foreach (explode(',', $header) as $part) {
        $pair = explode('=', $part, 2);
        if (count($pair) === 2) {
            $fields[$pair[0]] = $pair[1];
        }
    }
    if (!ctype_digit($fields['t'] ?? '') || !isset($fields['v1'])) {
        throw new RuntimeException('malformed signature header');
    }
    $expected = hash_hmac('sha256', $fields['t'] . '.' . $body, $secret);
    if (!hash_equals($expected, $fields['v1'])) {
        throw new RuntimeException('signature mismatch');
    }
    if (abs($now - (int) $fields['t']) > TOLERANCE_SECONDS) {
        throw new RuntimeException('timestamp outside tolerance');
    }
}

$body = file_get_contents('php://input');
try {
    kassa_verify(getenv('KASSA_WEBHOOK_SECRET'), $_SERVER['HTTP_KASSA_SIGNATURE'] ?? '', $body, time());
} catch (RuntimeException $e) {
    http_response_code(400);
    exit;
}
$message = json_decode($body, true);
$eventId = $_SERVER['HTTP_KASSA_EVENT_ID'];
// At least once: the same id may come again. Record $eventId with the effect of acting on
// $message in one transaction of your own, and skip an id already recorded.
http_response_code(204);
